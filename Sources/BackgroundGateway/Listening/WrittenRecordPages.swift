import NIOCore

/// Between the socket and NIOSSL, on a connection whose buffers are `PageBackedBuffers`: once
/// the socket has written a TLS record, the pages under it go back. NIOSSL writes each record
/// into one buffer and hands it on whole, so its own view of that buffer is empty by then; its
/// next record goes in from the buffer's start (the pages come back as it writes) or, if the
/// written one is still held, into a buffer of its own. An idle connection then keeps no page
/// of its 16 KB record buffer.
package final class WrittenRecordPages: ChannelOutboundHandler, RemovableChannelHandler {
    package typealias OutboundIn = ByteBuffer
    package typealias OutboundOut = ByteBuffer

    package init() {}

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let record = unwrapOutboundIn(data)
        let written = promise ?? context.eventLoop.makePromise()
        written.futureResult.whenComplete { _ in PageBackedBuffers.releasePages(of: record) }
        context.write(data, promise: written)
    }
}
