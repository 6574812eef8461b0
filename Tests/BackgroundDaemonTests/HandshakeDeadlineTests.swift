import NIOCore
import NIOEmbedded
import NIOTLS
import Testing

@testable import BackgroundGateway

/// The gateway's and the relay's handshake deadline (`HandshakeDeadline`, `HandshakeDone`): a
/// connection that has not finished its handshake in time is closed; one that has keeps neither
/// handler — a relay's device may sit idle on its connection for months.
struct HandshakeDeadlineTests {
    func connection() throws -> (EmbeddedChannel, EmbeddedEventLoop) {
        let loop = EmbeddedEventLoop()
        let channel = EmbeddedChannel(loop: loop)
        let deadline = HandshakeDeadline(timeout: .seconds(10))
        try channel.pipeline.syncOperations.addHandler(deadline)
        try channel.pipeline.syncOperations.addHandler(HandshakeDone(deadline: deadline))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 2197)).wait()
        return (channel, loop)
    }

    func holds<Handler: ChannelHandler>(_ channel: EmbeddedChannel, _ type: Handler.Type) -> Bool {
        (try? channel.pipeline.syncOperations.handler(type: type)) != nil
    }

    @Test func aConnectionSilentPastTheDeadlineIsClosed() throws {
        let (channel, loop) = try connection()
        loop.advanceTime(by: .seconds(9))
        #expect(channel.isActive)
        loop.advanceTime(by: .seconds(1))
        #expect(!channel.isActive)
    }

    @Test func aFinishedTLSHandshakeTakesBothHandlersAwayAndTheDeadlineWithThem() throws {
        let (channel, loop) = try connection()
        channel.pipeline.fireUserInboundEventTriggered(TLSUserEvent.handshakeCompleted(negotiatedProtocol: "h2"))
        #expect(!holds(channel, HandshakeDone.self))
        #expect(!holds(channel, HandshakeDeadline.self))
        loop.advanceTime(by: .seconds(3600))
        #expect(channel.isActive, "idle for an hour after its handshake, and open")
        _ = try channel.finish()
    }

    @Test func aFirstMessageCountsAsTheHandshakeAndGoesOnUnchanged() throws {
        let (channel, loop) = try connection()
        try channel.writeInbound(ByteBuffer(string: "PRI * HTTP/2.0"))
        #expect(try channel.readInbound(as: ByteBuffer.self) == ByteBuffer(string: "PRI * HTTP/2.0"))
        #expect(!holds(channel, HandshakeDone.self))
        #expect(!holds(channel, HandshakeDeadline.self))
        try channel.writeInbound(ByteBuffer(string: "more"))
        #expect(try channel.readInbound(as: ByteBuffer.self) == ByteBuffer(string: "more"))
        loop.advanceTime(by: .seconds(3600))
        #expect(channel.isActive)
        _ = try channel.finish()
    }
}
