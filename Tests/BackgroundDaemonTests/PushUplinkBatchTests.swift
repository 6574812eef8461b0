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
        let directory = NSTemporaryDirectory() + "bgd-uplink-batch-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = try BackgroundStore.open(atPath: directory + "/bgd.sqlite")
        let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
        let app = AppID(rawValue: "com.example.batch")!
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
        var acknowledged: [Int64] = []
        var lines = UplinkLines()
        for await answer in answers {
            for line in try lines.append(answer.readableBytesView) {
                if case .ack(let seq)? = UplinkFrame.decode(line) { acknowledged.append(seq) }
            }
        }
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
}
