import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Logging
import NIOCore
import Testing

@testable import BackgroundDaemon

/// bgd's end of the relay uplink commits the pushes that one read brought in one transaction,
/// then acknowledges each: a burst through the relay costs one commit (one fsync), not one per
/// push — at 1,000 pushes/s one per push was more than the disk could take, and relayed pushes
/// queued for hundreds of milliseconds.
struct PushUplinkBatchTests {
    @Test func thePushesOfOneReadAreCommittedTogetherThenEachAcknowledged() async throws {
        let (store, uplink, app, token, directory) = try await makeUplink(for: "com.example.batch")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // One read: 40 pushes, a stranger's among them (logged, acknowledged, not queued), and
        // a keep-alive's echo.
        var bytes = ByteBuffer()
        for seq in 1...40 {
            let push = RelayedPush(
                seq: Int64(seq), token: seq == 20 ? String(repeating: "cd", count: 32) : token, topic: app.rawValue,
                apnsID: "00000000-0000-4000-8000-\(String(format: "%012d", seq))", pushType: "background", priority: 5,
                collapseID: nil, expirationMilliseconds: nil, payload: Data(#"{"aps":{"content-available":1}}"#.utf8))
            bytes.writeBytes(UplinkFrame.push(push).encoded())
            bytes.writeString(seq == 10 ? "\n\n" : "\n")
        }
        let (body, feed) = AsyncStream<ByteBuffer>.makeStream()
        feed.yield(bytes)
        feed.finish()
        let (answers, sink) = AsyncStream<ByteBuffer>.makeStream()

        let before = store.commits.current
        await #expect(throws: PushUplink.Failure.self) { try await uplink.read(body, answering: sink) }
        #expect(store.commits.current - before == 1, "one commit for the read's 39 pushes")
        #expect(try await store.pushes(of: app).count == 39)

        sink.finish()
        let acknowledged = try await acknowledgements(in: answers)
        #expect(acknowledged == Array(1...40), "each acknowledged once, in order, the stranger's too")

        // A relay is a peer: an expiration past 9999 is kept within what the store can read back
        // (stored as it came, the push log trapped bgd at every start).
        var late = ByteBuffer()
        late.writeBytes(
            UplinkFrame.push(
                RelayedPush(
                    seq: 41, token: token, topic: app.rawValue, apnsID: "00000000-0000-4000-8000-000000000041",
                    pushType: "background", priority: 5, collapseID: nil, expirationMilliseconds: .max,
                    payload: Data(#"{"aps":{"content-available":1}}"#.utf8))
            ).encoded())
        late.writeString("\n")
        let (lateBody, lateFeed) = AsyncStream<ByteBuffer>.makeStream()
        lateFeed.yield(late)
        lateFeed.finish()
        let (_, lateSink) = AsyncStream<ByteBuffer>.makeStream()
        await #expect(throws: PushUplink.Failure.self) { try await uplink.read(lateBody, answering: lateSink) }
        let stored = try await store.pushes(of: app).first { $0.apnsID == "00000000-0000-4000-8000-000000000041" }
        #expect(stored?.expiration == StorableDates.latest, "\(String(describing: stored))")
    }

    /// A relay is a peer: what bgd's own gateway refuses, it drops when a relay sends it on
    /// (logged, and acknowledged so that the relay stops offering it), and queues the rest.
    /// Before, each of these was stored as it came and handed to the app.
    @Test func aRelayedPushTheGatewayWouldRefuseIsNotQueued() async throws {
        let (store, uplink, app, token, directory) = try await makeUplink(for: "com.example.shapes")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let silent = Data(#"{"aps":{"content-available":1}}"#.utf8)
        func push(
            _ seq: Int64, type: String = "background", priority: Int = 5, collapse: String? = nil, payload: Data? = nil
        )
            -> RelayedPush
        {
            RelayedPush(
                seq: seq, token: token, topic: app.rawValue,
                apnsID: "00000000-0000-4000-8000-\(String(format: "%012d", seq))",
                pushType: type, priority: priority, collapseID: collapse, expirationMilliseconds: nil,
                payload: payload ?? silent)
        }
        var bytes = ByteBuffer()
        for relayed in [
            push(1),
            push(2, priority: 10),  // BadPriority: a background push at 10
            push(3, type: "telepathy"),  // InvalidPushType
            push(4, payload: Data("not json".utf8)),  // InvalidPayload
            push(5, collapse: String(repeating: "c", count: 1000)),  // BadCollapseId
            push(
                6, type: "alert", priority: 10,
                payload: Data(#"{"aps":{"alert":"\#(String(repeating: "x", count: 5000))"}}"#.utf8)),  // PayloadTooLarge
            push(7, type: "alert", priority: 10, payload: Data(#"{"aps":{"alert":"hi"}}"#.utf8)),
        ] {
            bytes.writeBytes(UplinkFrame.push(relayed).encoded())
            bytes.writeString("\n")
        }
        let (body, feed) = AsyncStream<ByteBuffer>.makeStream()
        feed.yield(bytes)
        feed.finish()
        let (answers, sink) = AsyncStream<ByteBuffer>.makeStream()
        await #expect(throws: PushUplink.Failure.self) { try await uplink.read(body, answering: sink) }
        #expect(Set(try await store.pushes(of: app).map { String($0.apnsID.suffix(1)) }) == ["1", "7"])

        sink.finish()
        let acknowledged = try await acknowledgements(in: answers)
        #expect(acknowledged == Array(1...7), "each acknowledged: the relay offers none again")
    }

    /// An uplink over a store of its own (in a directory to remove), with `app` registered and
    /// a device token issued to it.
    func makeUplink(
        for id: String
    ) async throws -> (store: BackgroundStore, uplink: PushUplink, app: AppID, token: String, directory: String) {
        let directory = NSTemporaryDirectory() + "bgd-uplink-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let store = try BackgroundStore.open(atPath: directory + "/bgd.sqlite")
        let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
        let app = AppID(rawValue: id)!
        _ = try await store.register(
            RegisterAppRequest(id: app, launchCommand: LaunchCommand(["/bin/true"])!), tokenHash: "unused",
            now: clock.now)
        let token = try await store.deviceToken(
            for: app, makingWith: { String(repeating: "ab", count: 32) }, now: clock.now
        )
        .token
        let uplink = PushUplink(
            configuration: .init(), store: store, stateDirectory: directory, clock: clock, pushes: Doorbell(),
            logger: Logger(label: "test"))
        return (store, uplink, app, token, directory)
    }

    /// The sequence numbers bgd acknowledged, in the order of its answers.
    func acknowledgements(in answers: AsyncStream<ByteBuffer>) async throws -> [Int64] {
        var acknowledged: [Int64] = []
        var lines = UplinkLines()
        for await answer in answers {
            for line in try lines.append(answer.readableBytesView) {
                if case .ack(let seq)? = UplinkFrame.decode(line) { acknowledged.append(seq) }
            }
        }
        return acknowledged
    }
}
