import HummingbirdCore
import HummingbirdHTTP2
import Logging
import NIOCore
import NIOTLS

/// A protocol other than HTTP/2 offered on a TLS listener by its ALPN name: a connection that
/// asks for it by name is handed over as it is (TLS under it) — after `prepare` added the
/// handlers that read it — and `serve` runs it until it ends.
package struct ALPNAlternative: Sendable {
    package let name: String
    package let prepare: @Sendable (any Channel) throws -> Void
    package let serve: @Sendable (any Channel, Logger) async -> Void

    package init(
        name: String, prepare: @escaping @Sendable (any Channel) throws -> Void,
        serve: @escaping @Sendable (any Channel, Logger) async -> Void
    ) {
        self.name = name
        self.prepare = prepare
        self.serve = serve
    }
}

/// Under TLS: HTTP/2 (named in ALPN or not named at all), or `alternative` for a connection that
/// names it. bgrelay's device listener offers its uplink this way: a device that speaks the
/// uplink's lines straight on TLS costs the relay a fifth of one holding an HTTP/2 stream (no
/// HTTP/2 connection state, stream channel or per-stream task), on the same port.
struct LinesOrHTTP2Channel: ServerChildChannel {
    enum Negotiated: Sendable {
        case http2(HTTP2Channel.Value)
        case alternative(any Channel)
    }
    /// The connection, and what it will speak once TLS has negotiated it: set up returns at once
    /// (a child channel reads only once it is set up, and TLS needs to read to negotiate).
    struct Value: ServerChildChannelValue {
        let channel: any Channel
        let negotiated: EventLoopFuture<Negotiated>
    }

    let http2: ResetFilteredHTTP2Channel
    let alternative: ALPNAlternative

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        let (http2, alternative) = (self.http2, self.alternative)
        let negotiation = NIOTypedApplicationProtocolNegotiationHandler<Negotiated> { result, channel in
            if case .negotiated(alternative.name) = result {
                return channel.eventLoop.makeCompletedFuture {
                    try alternative.prepare(channel)
                    return .alternative(channel)
                }
            }
            return http2.setup(channel: channel, logger: logger).map { .http2($0) }
        }
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(negotiation)
            return Value(channel: channel, negotiated: negotiation.protocolNegotiationResult)
        }
    }

    func handle(value: Value, logger: Logger) async {
        do {
            switch try await value.negotiated.get() {
            case .http2(let connection): await http2.handle(value: connection, logger: logger)
            case .alternative(let connection): await alternative.serve(connection, logger)
            }
        } catch {
            logger.debug("Connection ended before it was negotiated", metadata: ["error": "\(error)"])
            try? await value.channel.close()
        }
    }
}
