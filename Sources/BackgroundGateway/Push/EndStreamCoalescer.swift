import NIOCore
import NIOHTTP2

/// Puts END_STREAM on a response's last HEADERS or DATA frame, as APNs does, instead of the
/// empty DATA frame NIO's HTTP/2 codec sends after it. Client libraries rely on that shape:
/// aioapns parses every DATA frame as the JSON error body and drops the connection on an empty
/// one. Sits in each HTTP/2 stream's pipeline, between the network and the HTTP codec.
final class EndStreamCoalescer: ChannelOutboundHandler, RemovableChannelHandler {
    typealias OutboundIn = HTTP2Frame.FramePayload
    typealias OutboundOut = HTTP2Frame.FramePayload

    /// The last frame written, held until we know whether the stream ends after it.
    private var held: (payload: HTTP2Frame.FramePayload, promise: EventLoopPromise<Void>?)?

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let payload = unwrapOutboundIn(data)
        if case .data(let end) = payload, end.endStream, end.data.readableBytes == 0, let last = held,
            let ended = Self.ending(last.payload)
        {
            held = nil
            if let earlier = last.promise {
                promise.map { earlier.futureResult.cascade(to: $0) }
                context.write(wrapOutboundOut(ended), promise: earlier)
            } else {
                context.write(wrapOutboundOut(ended), promise: promise)
            }
            return
        }
        release(context: context)
        if Self.ending(payload) != nil {
            held = (payload, promise)
        } else {
            context.write(data, promise: promise)
        }
    }

    func flush(context: ChannelHandlerContext) {
        release(context: context)
        context.flush()
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        release(context: context)
        context.close(mode: mode, promise: promise)
    }

    private func release(context: ChannelHandlerContext) {
        guard let last = held else { return }
        held = nil
        context.write(wrapOutboundOut(last.payload), promise: last.promise)
    }

    /// The frame with END_STREAM set, if it is a HEADERS or DATA frame that does not end the stream yet.
    private static func ending(_ payload: HTTP2Frame.FramePayload) -> HTTP2Frame.FramePayload? {
        switch payload {
        case .headers(var headers) where !headers.endStream:
            headers.endStream = true
            return .headers(headers)
        case .data(var data) where !data.endStream:
            data.endStream = true
            return .data(data)
        default:
            return nil
        }
    }

    /// Added by Hummingbird after the stream's codec; puts the coalescer in front of it.
    final class Installer: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = Never
        func handlerAdded(context: ChannelHandlerContext) {
            try? context.pipeline.syncOperations.addHandler(EndStreamCoalescer(), position: .first)
        }
    }
}
