import NIOCore
import NIOHTTP2

/// Drops a client's RST_STREAM frames for streams bgd has already closed, before NIO's HTTP/2
/// codec counts them.
///
/// Why: AsyncHTTPClient (and with it APNSwift, the Swift provider library) closes its side of a
/// stream as soon as the answer's END_STREAM arrives, and when that close wins the race with
/// the stream's own closed event it sends RST_STREAM(CANCEL) for a stream that is already over —
/// a few in a hundred requests at 1,000 pushes/s. NIO's codec counts every RST_STREAM against
/// its rapid-reset guard (200 in 30 s, CVE-2023-44487) and, past it, sends GOAWAY with last stream
/// 0 and ENHANCE_YOUR_CALM: every request then in flight on that connection fails with
/// `StreamClosed(cancel)` after bgd had received all of it. The latency benchmark lost 0.3–1.6 %
/// of its POSTs that way, in bursts, on connections that lasted 3,000–5,000 requests.
///
/// RFC 9113 §5.1 says a RST_STREAM on a closed stream is to be ignored, which is all this does:
/// a reset of a stream still open (the attack the guard is for) still reaches the codec and is
/// still counted. Sits between TLS and the HTTP/2 codec, reads only frame headers, and passes
/// the bytes it was given on unchanged unless it drops a frame.
package final class ClosedStreamResetFilter: ChannelInboundHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = ByteBuffer

    static let frameHeaderLength = 9
    static let rstStreamType: UInt8 = 0x3
    /// The client's connection preface ("PRI * HTTP/2.0…"), before the first frame.
    static let prefaceLength = 24
    /// How many closed streams are remembered: a stray reset follows its stream's end by a round
    /// trip, and this covers a quarter of a second at 1,000 requests/s.
    package static let remembered = 256

    private var prefaceLeft = ClosedStreamResetFilter.prefaceLength
    /// The start of a frame header that ended a read, held back until the rest arrives.
    private var partialHeader: [UInt8] = []
    /// Payload bytes of the current frame still to come, and whether they are being dropped.
    private var payloadLeft = 0
    private var dropping = false
    private var closed = RecentStreamIDs(capacity: ClosedStreamResetFilter.remembered)
    /// Resets dropped so far.
    package private(set) var dropped = 0

    package init() {}

    /// A stream of this connection has closed: a reset of it from now on means nothing.
    package func streamClosed(_ id: Int) { closed.insert(id) }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let input = unwrapInboundIn(data)
        if let output = filter(input, allocator: context.channel.allocator) {
            if output.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(output)) }
        } else {
            context.fireChannelRead(data)
        }
    }

    /// The bytes to pass on, or nil to pass `input` on as it is.
    package func filter(_ input: ByteBuffer, allocator: ByteBufferAllocator) -> ByteBuffer? {
        let end = input.writerIndex
        var index = input.readerIndex
        var runStart = index
        var output: ByteBuffer?
        /// From here on the bytes passed on differ from `input`: copy what was kept so far.
        func divert(upTo position: Int) {
            if output == nil { output = allocator.buffer(capacity: end - input.readerIndex) }
            if position > runStart { output!.writeImmutableBuffer(input.getSlice(at: runStart, length: position - runStart)!) }
            runStart = position
        }
        while index < end {
            if prefaceLeft > 0 {
                let n = min(prefaceLeft, end - index)
                prefaceLeft -= n
                index += n
                continue
            }
            if payloadLeft > 0 {
                let n = min(payloadLeft, end - index)
                if dropping { divert(upTo: index) }
                index += n
                payloadLeft -= n
                if dropping { runStart = index }
                if payloadLeft == 0 { dropping = false }
                continue
            }
            let needed = Self.frameHeaderLength - partialHeader.count
            guard end - index >= needed else {
                // The header goes on past this read: hold its start back.
                divert(upTo: index)
                partialHeader += input.getBytes(at: index, length: end - index)!
                index = end
                runStart = end
                continue
            }
            let held = partialHeader
            let (length, type, streamID): (Int, UInt8, Int)
            if held.isEmpty {
                // The usual case, read in place: 24-bit length, type, flags, 31-bit stream ID.
                length = Int(input.getInteger(at: index, as: UInt32.self)! >> 8)
                type = input.getInteger(at: index + 3, as: UInt8.self)!
                streamID = Int(input.getInteger(at: index + 5, as: UInt32.self)! & 0x7fff_ffff)
            } else {
                let header = held + input.getBytes(at: index, length: needed)!
                partialHeader = []
                length = Int(header[0]) << 16 | Int(header[1]) << 8 | Int(header[2])
                type = header[3]
                streamID = (Int(header[5]) & 0x7f) << 24 | Int(header[6]) << 16 | Int(header[7]) << 8 | Int(header[8])
            }
            let drop = type == Self.rstStreamType && length == 4 && closed.contains(streamID)
            if drop {
                divert(upTo: index)
                index += needed
                runStart = index
                dropped += 1
            } else {
                if !held.isEmpty {
                    divert(upTo: index)
                    output!.writeBytes(held)
                }
                index += needed
            }
            payloadLeft = length
            dropping = drop && length > 0
        }
        guard output != nil else { return nil }
        divert(upTo: end)
        return output
    }

    /// Registers each stream of the connection with the connection's filter as it opens, so the
    /// filter learns when it closes. One per stream, among the stream's handlers.
    final class Registration: ChannelInboundHandler, RemovableChannelHandler {
        typealias InboundIn = Never

        func handlerAdded(context: ChannelHandlerContext) {
            guard let parent = context.channel.parent,
                let id = try? context.channel.syncOptions?.getOption(HTTP2StreamChannelOptions.streamID),
                let filter = try? parent.pipeline.syncOperations.handler(type: ClosedStreamResetFilter.self)
            else { return }
            context.channel.closeFuture.assumeIsolated().whenComplete { _ in filter.streamClosed(Int(id)) }
        }
    }
}

/// The last few stream IDs, oldest forgotten first; looked up only when a reset arrives.
struct RecentStreamIDs {
    private var ids: [Int] = []
    private var next = 0
    let capacity: Int

    init(capacity: Int) { self.capacity = max(1, capacity) }

    mutating func insert(_ id: Int) {
        if ids.count < capacity {
            ids.append(id)
        } else {
            ids[next] = id
            next = (next + 1) % capacity
        }
    }

    func contains(_ id: Int) -> Bool { ids.contains(id) }
}
