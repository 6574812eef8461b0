import NIOCore

/// Drops a client's RST_STREAM frames for streams bgd has already finished, before NIO's HTTP/2
/// codec counts them.
///
/// Why: AsyncHTTPClient (and with it APNSwift, the Swift provider library) closes its side of a
/// stream as soon as the answer's END_STREAM arrives, and when that close wins the race with
/// the stream's own closed event it sends RST_STREAM(CANCEL) for a stream that is already over —
/// a few in a hundred requests at 1,000 pushes/s. NIO's codec counts every RST_STREAM against
/// its rapid-reset guard (200 in 30 s, CVE-2023-44487) and, past it, sends GOAWAY with last stream
/// 0 and ENHANCE_YOUR_CALM: every request then in flight on that connection fails with
/// `StreamClosed(cancel)` after bgd had received all of it. The latency benchmark lost 0.5–0.7 %
/// of its POSTs that way, in bursts, on connections that lasted 3,000–5,000 requests.
///
/// RFC 9113 §5.1 says a RST_STREAM on a closed stream is to be ignored, which is all this does:
/// a reset of a stream bgd has not answered (the attack the guard is for) still reaches the
/// codec and is still counted. Which streams are over it reads from bgd's own frames on their
/// way out: a stream bgd ended (END_STREAM) or reset is over for bgd — its stream channel closes
/// with its answer. Sits between TLS and the HTTP/2 codec, reads only frame headers both ways,
/// and passes the bytes on unchanged unless it drops a frame.
package final class ClosedStreamResetFilter: ChannelDuplexHandler, RemovableChannelHandler {
    package typealias InboundIn = ByteBuffer
    package typealias InboundOut = ByteBuffer
    package typealias OutboundIn = IOData
    package typealias OutboundOut = IOData

    static let frameHeaderLength = 9
    static let dataType: UInt8 = 0x0
    static let headersType: UInt8 = 0x1
    static let rstStreamType: UInt8 = 0x3
    static let endStreamFlag: UInt8 = 0x1
    /// The client's connection preface ("PRI * HTTP/2.0…"), before the first frame.
    static let prefaceLength = 24
    /// How many finished streams are remembered: a stray reset follows its stream's end by a
    /// round trip, and this covers a quarter of a second at 1,000 requests/s.
    package static let remembered = 256

    private var prefaceLeft = ClosedStreamResetFilter.prefaceLength
    /// The start of a frame header that ended a read, held back until the rest arrives.
    private var partialHeader: [UInt8] = []
    /// Payload bytes of the current frame still to come, and whether they are being dropped.
    private var payloadLeft = 0
    private var dropping = false
    private var closed = RecentStreamIDs(capacity: ClosedStreamResetFilter.remembered)
    /// Where bgd's own frames are, on their way out.
    private var outbound = FrameBoundaries()
    /// Resets dropped so far.
    package private(set) var dropped = 0

    package init() {}

    /// A stream of this connection is over for bgd: a reset of it from now on means nothing.
    package func streamClosed(_ id: Int) { closed.insert(id) }

    package func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        if case .byteBuffer(let buffer) = unwrapOutboundIn(data) { sent(buffer) }
        context.write(data, promise: promise)
    }

    /// Notes the streams that bytes bgd sends end or reset.
    package func sent(_ buffer: ByteBuffer) {
        outbound.walk(buffer) { type, flags, streamID in
            let ends = type == Self.rstStreamType
                || ((type == Self.dataType || type == Self.headersType) && flags & Self.endStreamFlag != 0)
            if ends { closed.insert(streamID) }
        }
    }

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
            let header = FrameBoundaries.header(in: input, at: index, after: held)
            partialHeader = []
            let (length, type, streamID) = (header.length, header.type, header.streamID)
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
}

/// Follows the frames in a byte stream that may be cut anywhere, reporting each frame's header.
struct FrameBoundaries {
    private var payloadLeft = 0
    private var partialHeader: [UInt8] = []

    mutating func walk(_ buffer: ByteBuffer, _ header: (_ type: UInt8, _ flags: UInt8, _ streamID: Int) -> Void) {
        var index = buffer.readerIndex
        let end = buffer.writerIndex
        while index < end {
            if payloadLeft > 0 {
                let n = min(payloadLeft, end - index)
                index += n
                payloadLeft -= n
                continue
            }
            let needed = ClosedStreamResetFilter.frameHeaderLength - partialHeader.count
            guard end - index >= needed else {
                partialHeader += buffer.getBytes(at: index, length: end - index)!
                return
            }
            let frame = Self.header(in: buffer, at: index, after: partialHeader)
            partialHeader = []
            index += needed
            payloadLeft = frame.length
            header(frame.type, frame.flags, frame.streamID)
        }
    }

    /// The frame header whose first bytes are `held` and whose rest starts at `index`: 24-bit
    /// length, type, flags, 31-bit stream ID.
    static func header(
        in buffer: ByteBuffer, at index: Int, after held: [UInt8]
    ) -> (length: Int, type: UInt8, flags: UInt8, streamID: Int) {
        if held.isEmpty {
            // The usual case, read in place.
            return (
                Int(buffer.getInteger(at: index, as: UInt32.self)! >> 8), buffer.getInteger(at: index + 3, as: UInt8.self)!,
                buffer.getInteger(at: index + 4, as: UInt8.self)!,
                Int(buffer.getInteger(at: index + 5, as: UInt32.self)! & 0x7fff_ffff)
            )
        }
        let bytes = held + buffer.getBytes(at: index, length: ClosedStreamResetFilter.frameHeaderLength - held.count)!
        return (
            Int(bytes[0]) << 16 | Int(bytes[1]) << 8 | Int(bytes[2]), bytes[3], bytes[4],
            (Int(bytes[5]) & 0x7f) << 24 | Int(bytes[6]) << 16 | Int(bytes[7]) << 8 | Int(bytes[8])
        )
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
