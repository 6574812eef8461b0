import BackgroundModel
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHPACK
import NIOHTTP2
import NIOPosix

/// One POST over HTTP/2 without TLS ("prior knowledge", h2c), as `bgd --push-plaintext` serves
/// pushes and `curl --http2-prior-knowledge` sends them. AsyncHTTPClient speaks HTTP/2 only over
/// TLS, so `bgctl push send` would otherwise speak HTTP/1.1 to every http:// gateway, and a
/// plaintext HTTP/2 one closes that connection.
enum PriorKnowledgePost {
    /// The peer answered the HTTP/2 preface as an HTTP/1.1 server does (`bgd --push-http1`), or
    /// closed the connection without a byte: nothing was delivered, so HTTP/1.1 may be tried.
    struct NotHTTP2: Error {}
    /// No answer within the time given.
    struct TimedOut: Error {}

    static func post(url: URL, headers: [(String, String)], body: Data, timeout: Duration) async throws -> PushAnswer {
        guard let host = url.host, let port = url.port ?? (url.scheme == "http" ? 80 : nil) else {
            throw URLError(.badURL)
        }
        let clock = SystemClock()
        return try await withThrowingTaskGroup(of: PushAnswer?.self) { group in
            group.addTask {
                try await exchange(host: host, port: port, url: url, headers: headers, body: body, timeout: timeout)
            }
            group.addTask {
                try await clock.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            guard let answer = try await group.next() ?? nil else { throw TimedOut() }
            return answer
        }
    }

    private static func exchange(
        host: String, port: Int, url: URL, headers: [(String, String)], body: Data, timeout: Duration
    ) async throws -> PushAnswer {
        let probe = FirstBytes()
        let (connection, multiplexer) = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(TimeAmount(timeout))
            .connect(host: host, port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(probe)
                    let multiplexer = try channel.pipeline.syncOperations.configureAsyncHTTP2Pipeline(mode: .client) {
                        // A client is sent no streams; one the peer opened anyway is closed.
                        stream in stream.close()
                    }
                    return (channel, multiplexer)
                }
            }
        defer { connection.close(promise: nil) }
        do {
            let stream = try await multiplexer.openStream { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<HTTP2Frame.FramePayload, HTTP2Frame.FramePayload>(
                        wrappingChannelSynchronously: channel)
                }
            }
            var requestHeaders = HPACKHeaders([
                (":method", "POST"), (":scheme", "http"), (":authority", "\(host):\(port)"),
                (":path", url.path.isEmpty ? "/" : url.path), ("content-length", "\(body.count)"),
            ])
            for (name, value) in headers { requestHeaders.add(name: name, value: value) }
            let answer = try await stream.executeThenClose { inbound, outbound in
                try await outbound.write(.headers(.init(headers: requestHeaders)))
                try await outbound.write(.data(.init(data: .byteBuffer(ByteBuffer(bytes: body)), endStream: true)))
                var status = 0
                var apnsID: String?
                var received = ByteBuffer()
                for try await frame in inbound {
                    switch frame {
                    case .headers(let headers):
                        if let code = headers.headers.first(name: ":status").flatMap(Int.init) { status = code }
                        apnsID = headers.headers.first(name: "apns-id") ?? apnsID
                        if headers.endStream { return (status, apnsID, received) }
                    case .data(let data):
                        if case .byteBuffer(var bytes) = data.data, received.readableBytes < 1 << 16 {
                            received.writeBuffer(&bytes)
                        }
                        if data.endStream { return (status, apnsID, received) }
                    case .rstStream(let code): throw NIOHTTP2Errors.streamClosed(streamID: .rootStream, errorCode: code)
                    default: continue
                    }
                }
                throw NIOHTTP2Errors.streamClosed(streamID: .rootStream, errorCode: .cancel)
            }
            return PushAnswer(status: answer.0, body: answer.2, apnsID: answer.1, httpVersion: "HTTP/2.0")
        } catch {
            if !probe.spokeHTTP2 { throw NotHTTP2() }
            throw error
        }
    }

    /// Whether the peer's first bytes were HTTP/2's (not "HTTP/1.1 400 …"); an HTTP/1.1 one is
    /// closed at once rather than parsed as frames.
    private final class FirstBytes: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        typealias InboundOut = ByteBuffer
        private let state = NIOLockedValueBox<Bool?>(nil)

        var spokeHTTP2: Bool { state.withLockedValue { $0 } == true }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = unwrapInboundIn(data)
            let seen = state.withLockedValue { seen in
                if seen == nil { seen = bytes.getString(at: bytes.readerIndex, length: min(5, bytes.readableBytes)) != "HTTP/" }
                return seen!
            }
            guard seen else { return context.close(promise: nil) }
            context.fireChannelRead(data)
        }
    }
}
