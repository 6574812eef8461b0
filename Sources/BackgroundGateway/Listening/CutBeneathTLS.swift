import NIOCore

extension Channel {
    /// Closes the connection at once, beneath its TLS: from `WrittenRecordPages`, which sits
    /// under NIOSSL, so no close_notify is sent and none waited for. A plain `close()` goes
    /// through NIOSSL, which waits up to its shutdown timeout (5 s) for the peer's answer before
    /// the socket closes and pending writes fail — time a peer that reads nothing never gives
    /// back. Without that handler (an HTTP/2 connection), an ordinary close: NIOSSL's timeout
    /// then bounds it.
    package func cutBeneathTLS() {
        pipeline.context(handlerType: WrittenRecordPages.self).whenComplete { [self] result in
            switch result {
            case .success(let beneath): beneath.close(promise: nil)
            case .failure: close(promise: nil)
            }
        }
    }
}
