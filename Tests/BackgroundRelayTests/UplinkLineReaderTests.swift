import BackgroundModel
import NIOCore
import NIOEmbedded
import Testing

@testable import BackgroundRelay

/// The reader of a line uplink: the first line is the credential, handed to the session once;
/// the lines after it go to the session's inbox.
struct UplinkLineReaderTests {
    @Test func theCredentialIsHandedOverOnceAndNotKeptForTheConnectionsLife() throws {
        let channel = EmbeddedChannel()
        let reader = UplinkLineReader(eventLoop: channel.eventLoop, within: .seconds(10))
        try channel.pipeline.syncOperations.addHandler(reader)
        // Split where a TCP read may split it: in the credential, and with a frame behind it.
        try channel.writeInbound(ByteBuffer(string: "Bearer 0123abcd.se"))
        try channel.writeInbound(ByteBuffer(string: "cret\n{\"type\":\"ack\",\"seq\":7}\n"))
        channel.embeddedEventLoop.run()

        let future = try #require(reader.takeCredential())
        var credential: String?
        future.whenSuccess { credential = $0 }
        #expect(credential == "Bearer 0123abcd.secret")
        #expect(reader.takeCredential() == nil, "a second take finds nothing: the reader let it go")
        #expect(reader.inbox.take().acks == [7])
        _ = try channel.finish()
    }

    /// The credential is handed over once the read it came in has been taken in whole: a
    /// device that closed in the same read (its close_notify right behind the line) has ended
    /// by then, so its session takes nothing over (`UplinkSession.begin`).
    @Test func aCloseInTheCredentialsReadEndsTheInboxBeforeTheCredentialIsHandedOver() throws {
        let channel = EmbeddedChannel()
        let reader = UplinkLineReader(eventLoop: channel.eventLoop, within: .seconds(10))
        try channel.pipeline.syncOperations.addHandler(reader)
        let future = try #require(reader.takeCredential())
        var credential: String?
        future.whenSuccess { credential = $0 }
        try channel.writeInbound(ByteBuffer(string: "Bearer 0123abcd.secret\n"))
        channel.pipeline.fireUserInboundEventTriggered(ChannelEvent.inputClosed)
        #expect(credential == nil, "not before the read is done")
        #expect(reader.inbox.hasEnded)
        channel.embeddedEventLoop.run()
        #expect(credential == "Bearer 0123abcd.secret")
        _ = try channel.finish()
    }

    @Test func aConnectionThatEndsBeforeItsFirstLineHasNoCredential() throws {
        let channel = EmbeddedChannel()
        let reader = UplinkLineReader(eventLoop: channel.eventLoop, within: .seconds(10))
        try channel.pipeline.syncOperations.addHandler(reader)
        try channel.writeInbound(ByteBuffer(string: "Bearer 01"))
        let future = try #require(reader.takeCredential())
        _ = try channel.finish()
        var failed = false
        future.whenFailure { failed = $0 is UplinkLineReader.NoCredential }
        #expect(failed)
    }
}
