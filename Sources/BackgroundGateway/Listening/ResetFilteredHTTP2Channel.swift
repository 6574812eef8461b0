import HummingbirdCore
import HummingbirdHTTP2
import Logging
import NIOCore

/// Hummingbird's HTTP/2 server channel with a `ClosedStreamResetFilter` in front of its codec:
/// a client's late resets of streams already answered do not count against the rapid-reset
/// guard, which otherwise ends a busy AsyncHTTPClient connection every few thousand requests
/// with the requests then in flight.
struct ResetFilteredHTTP2Channel: ServerChildChannel {
    typealias Value = HTTP2Channel.Value

    let base: HTTP2Channel

    init(responder: @escaping HTTPChannelHandler.Responder, configuration: HTTP2Channel.Configuration) {
        base = HTTP2Channel(responder: responder, configuration: configuration)
    }

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            // At the end of the pipeline so far (after TLS): the codec goes in after it.
            try channel.pipeline.syncOperations.addHandler(ClosedStreamResetFilter())
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }
    }

    func handle(value: Value, logger: Logger) async { await base.handle(value: value, logger: logger) }
}
