import BackgroundGateway
import BackgroundTesting
import Foundation
import NIOCore
import NIOPosix
import Synchronization
import Testing

/// A client's RST_STREAM for a stream bgd has already answered is ignored (RFC 9113 §5.1), and
/// not counted against the HTTP/2 codec's rapid-reset guard, which ends the whole connection —
/// with every request then in flight — after 200 resets in 30 s. AsyncHTTPClient sends such late
/// resets for a few requests in a hundred under load.
@Suite(.timeLimit(.minutes(5)))
struct StrayResetTests {
    /// A frame as it goes on the wire.
    static func frame(type: UInt8, flags: UInt8 = 0, stream: UInt32, payload: [UInt8] = []) -> [UInt8] {
        let length = UInt32(payload.count)
        var bytes: [UInt8] = [UInt8(length >> 16 & 0xff), UInt8(length >> 8 & 0xff), UInt8(length & 0xff), type, flags]
        bytes += [UInt8(stream >> 24 & 0x7f), UInt8(stream >> 16 & 0xff), UInt8(stream >> 8 & 0xff), UInt8(stream & 0xff)]
        return bytes + payload
    }
    static let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
    static func reset(_ stream: UInt32) -> [UInt8] { frame(type: 3, stream: stream, payload: [0, 0, 0, 8]) }

    /// Runs `bytes` through a filter in the given pieces and returns what it passed on.
    func passed(_ bytes: [UInt8], in pieces: [Int], closed: [Int]) -> (bytes: [UInt8], dropped: Int) {
        let filter = ClosedStreamResetFilter()
        for id in closed { filter.streamClosed(id) }
        var out: [UInt8] = []
        var start = 0
        for size in pieces + [bytes.count] where start < bytes.count {
            let end = min(bytes.count, start + size)
            let input = ByteBuffer(bytes: bytes[start..<end])
            let output = filter.filter(input, allocator: ByteBufferAllocator()) ?? input
            out += output.readableBytesView
            start = end
        }
        return (out, filter.dropped)
    }

    /// Whatever the reads' boundaries — the preface, a header or a reset's payload cut anywhere —
    /// exactly the resets of closed streams go, and every other byte passes in order.
    @Test func dropsExactlyTheResetsOfClosedStreamsWhereverReadsSplitThem() {
        let settings = Self.frame(type: 4, stream: 0, payload: [0, 3, 0, 0, 0, 100])
        let headers = Self.frame(type: 1, flags: 5, stream: 5, payload: Array(repeating: 0x82, count: 20))
        let data = Self.frame(type: 0, flags: 1, stream: 5, payload: Array("{\"aps\":{}}".utf8))
        // Stream 1 and 3 are closed, 5 is not; a reset of 5 (still open) must reach the codec.
        let bytes = Self.preface + settings + Self.reset(1) + headers + Self.reset(5) + Self.reset(3) + data
        let expected = Self.preface + settings + headers + Self.reset(5) + data
        for size in 1...bytes.count {
            let result = passed(bytes, in: Array(repeating: size, count: bytes.count), closed: [1, 3])
            #expect(result.bytes == expected, "reads of \(size) bytes")
            #expect(result.dropped == 2, "reads of \(size) bytes")
        }
        for cut in 1..<bytes.count {
            let result = passed(bytes, in: [cut], closed: [1, 3])
            #expect(result.bytes == expected, "one cut at \(cut)")
        }
    }

    /// The filter learns which streams are over from bgd's own frames on their way out, however
    /// the writes cut them: END_STREAM on HEADERS or DATA, or a reset bgd sent. A stream bgd has
    /// only begun to answer is not over: a reset of it reaches the codec.
    @Test func learnsWhichStreamsAreOverFromBgdsOwnFrames() {
        let outbound =
            Self.frame(type: 1, flags: 0x4, stream: 1, payload: [0x88])  // answer begun, not ended
            + Self.frame(type: 0, flags: 0x1, stream: 1, payload: Array(repeating: 0x20, count: 30))  // ended
            + Self.frame(type: 1, flags: 0x5, stream: 3, payload: [0x88])  // headers only, ended
            + Self.frame(type: 0, flags: 0x0, stream: 5, payload: Array(repeating: 0x20, count: 30))  // not ended
            + Self.reset(7)  // bgd reset it
        let inbound = Self.preface + Self.reset(1) + Self.reset(3) + Self.reset(5) + Self.reset(7) + Self.reset(9)
        for size in 1...outbound.count {
            let filter = ClosedStreamResetFilter()
            var start = 0
            while start < outbound.count {
                filter.sent(ByteBuffer(bytes: outbound[start..<min(outbound.count, start + size)]))
                start += size
            }
            let input = ByteBuffer(bytes: inbound)
            let output = filter.filter(input, allocator: ByteBufferAllocator()) ?? input
            #expect(Array(output.readableBytesView) == Self.preface + Self.reset(5) + Self.reset(9), "writes of \(size)")
            #expect(filter.dropped == 3, "writes of \(size)")
        }
    }

    /// Nothing to drop: the very buffer read is passed on, not a copy.
    @Test func passesAReadWithNothingToDropAsItIs() {
        let filter = ClosedStreamResetFilter()
        filter.streamClosed(1)
        let bytes = Self.preface + Self.frame(type: 4, stream: 0) + Self.reset(3)
        #expect(filter.filter(ByteBuffer(bytes: bytes), allocator: ByteBufferAllocator()) == nil)
        #expect(filter.dropped == 0)
    }

    /// A reset with a malformed length is the codec's to refuse, and an old stream forgotten
    /// after `remembered` newer ones closed is passed on too.
    @Test func leavesMalformedResetsAndForgottenStreamsToTheCodec() {
        let malformed = Self.frame(type: 3, stream: 1, payload: [0, 0, 8])
        var result = passed(Self.preface + malformed, in: [], closed: [1])
        #expect(result.bytes == Self.preface + malformed && result.dropped == 0)
        let newer = (1...ClosedStreamResetFilter.remembered).map { 1 + 2 * $0 }
        result = passed(Self.preface + Self.reset(1), in: [], closed: [1] + newer)
        #expect(result.bytes == Self.preface + Self.reset(1) && result.dropped == 0)
    }

    /// The HPACK block of a POST to the gateway, every field a literal (no table, no Huffman).
    static let requestBlock: [UInt8] = {
        let fields = [
            (":method", "POST"), (":scheme", "http"), (":authority", "127.0.0.1"),
            (":path", "/3/device/" + String(repeating: "a", count: 64)),
        ]
        var block: [UInt8] = []
        for (name, value) in fields {
            block.append(0x00)
            block.append(UInt8(name.utf8.count))
            block += Array(name.utf8)
            block.append(UInt8(value.utf8.count))
            block += Array(value.utf8)
        }
        return block
    }()

    /// A client that resets every stream after its answer — as AsyncHTTPClient does when its close
    /// wins a race — 250 times on one connection, past the guard's 200 in 30 s: the connection
    /// still answers. (Without the filter bgd sends GOAWAY with ENHANCE_YOUR_CALM after the 200th.)
    @Test func lateResetsOfAnsweredStreamsDoNotEndTheConnection() async throws {
        try await TestDaemon.with(push: .init(port: 0, security: .plaintext)) { daemon in
            let port = try #require(await daemon.daemon.pushGateway?.boundPort.wait())
            let client = try await RawHTTP2Client.connect(port: port)
            defer { client.close() }
            var frames = client.frames.makeAsyncIterator()
            client.send(Self.preface + Self.frame(type: 4, stream: 0))
            let resets = 250
            for request in 0...resets {
                let stream = UInt32(1 + 2 * request)
                client.send(Self.frame(type: 1, flags: 0x5, stream: stream, payload: Self.requestBlock))
                var status: String?
                answer: while true {
                    guard let frame = await frames.next() else {
                        Issue.record("The connection closed after \(request) answered requests")
                        return
                    }
                    switch frame.type {
                    case 4 where frame.flags & 0x1 == 0: client.send(Self.frame(type: 4, flags: 0x1, stream: 0))
                    case 7:
                        let code = frame.payload.count >= 8 ? frame.payload[4...7].reduce(0) { $0 << 8 | Int($1) } : -1
                        Issue.record("GOAWAY (error \(code)) after \(request) answered requests")
                        return
                    case 1 where frame.stream == stream: status = "answered"
                    default: break
                    }
                    if frame.stream == stream, frame.flags & 0x1 != 0 { break answer }
                }
                #expect(status == "answered", "stream \(stream)")
                if request < resets { client.send(Self.reset(stream)) }
            }
        }
    }
}

/// HTTP/2 spoken by hand over plaintext TCP: frames written as bytes, and every frame read back.
final class RawHTTP2Client: Sendable {
    struct Frame: Sendable {
        var type: UInt8
        var flags: UInt8
        var stream: UInt32
        var payload: [UInt8]
    }
    let channel: any Channel
    let frames: AsyncStream<Frame>

    private init(channel: any Channel, frames: AsyncStream<Frame>) {
        self.channel = channel
        self.frames = frames
    }

    static func connect(port: Int) async throws -> RawHTTP2Client {
        let (frames, sink) = AsyncStream<Frame>.makeStream()
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(FrameReader(sink: sink))
                }
            }
            .connect(host: "127.0.0.1", port: port).get()
        return RawHTTP2Client(channel: channel, frames: frames)
    }

    func send(_ bytes: [UInt8]) { channel.writeAndFlush(ByteBuffer(bytes: bytes), promise: nil) }

    func close() { channel.close(promise: nil) }

    /// Cuts what the connection reads into frames.
    private final class FrameReader: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer
        private let sink: AsyncStream<Frame>.Continuation
        private let pending = Mutex<[UInt8]>([])

        init(sink: AsyncStream<Frame>.Continuation) { self.sink = sink }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            let bytes = Array(unwrapInboundIn(data).readableBytesView)
            pending.withLock { pending in
                pending += bytes
                while pending.count >= 9 {
                    let length = Int(pending[0]) << 16 | Int(pending[1]) << 8 | Int(pending[2])
                    guard pending.count >= 9 + length else { break }
                    let stream = UInt32(pending[5] & 0x7f) << 24 | UInt32(pending[6]) << 16 | UInt32(pending[7]) << 8
                        | UInt32(pending[8])
                    sink.yield(Frame(type: pending[3], flags: pending[4], stream: stream, payload: Array(pending[9..<9 + length])))
                    pending.removeFirst(9 + length)
                }
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            sink.finish()
            context.fireChannelInactive()
        }
    }
}
