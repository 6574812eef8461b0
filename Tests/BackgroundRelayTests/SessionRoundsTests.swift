import BackgroundGateway
import BackgroundModel
import BackgroundTesting
import Foundation
import Hummingbird
import Logging
import NIOCore
import Synchronization
import Testing

@testable import BackgroundRelay

/// The line uplink's session without a task of its own while it waits (`SessionRounds`), on a
/// real SQLite store: it sends what is pending once started and again whenever rung, takes the
/// device's acknowledgements, never runs two rounds at once, and ends once.
struct SessionRoundsTests {
    let topic = "com.example.news"
    let token = String(repeating: "ef", count: 32)

    /// What the session wrote, line by line; each write yields many times (another round, were
    /// one to start meanwhile, would be seen writing too); `failing` refuses every write.
    final class RecordingWriter: ResponseBodyWriter, @unchecked Sendable {
        struct State {
            var lines: [String] = []
            var writing = 0
            var overlapped = false
            var finished = 0
        }
        let state = Mutex(State())
        let failing: Bool

        init(failing: Bool = false) { self.failing = failing }

        struct Refused: Error {}

        func write(_ buffer: ByteBuffer) async throws {
            if failing { throw Refused() }
            state.withLock {
                $0.writing += 1
                if $0.writing > 1 { $0.overlapped = true }
            }
            for _ in 0..<1_000 { await Task.yield() }
            state.withLock {
                $0.writing -= 1
                $0.lines += String(buffer: buffer).split(separator: "\n", omittingEmptySubsequences: false).dropLast()
                    .map(String.init)
            }
        }

        func finish(_ trailingHeaders: HTTPFields?) async throws { state.withLock { $0.finished += 1 } }

        var lines: [String] { state.withLock { $0.lines } }
        var overlapped: Bool { state.withLock { $0.overlapped } }
        var finished: Int { state.withLock { $0.finished } }

        var pushIDs: [String] {
            lines.compactMap { line -> String? in
                guard case .push(let push) = UplinkFrame.decode(Array(line.utf8)) else { return nil }
                return push.apnsID
            }
        }
    }

    final class Count: Sendable {
        private let count = Mutex(0)
        var value: Int { count.withLock { $0 } }
        func add() { count.withLock { $0 += 1 } }
    }

    func push(_ owner: RelayTokenOwner, id: String) -> AcceptedPush<RelayTokenOwner> {
        AcceptedPush(
            owner: owner, deviceToken: token, apnsID: id, pushType: "background", priority: 5, collapseID: nil,
            expiration: nil, payload: Data(#"{"aps":{"content-available":1}}"#.utf8))
    }

    /// Waits for what a round does in its own task, yielding instead of sleeping.
    func eventually(_ condition: () async throws -> Bool) async throws -> Bool {
        for _ in 0..<200_000 {
            if try await condition() { return true }
            await Task.yield()
        }
        return try await condition()
    }

    @Test func aStartedSessionSendsWhatIsPendingTakesAcknowledgementsAndEndsOnce() async throws {
        let clock = ManualClock()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rounds-\(UUID().uuidString)").path
        let store = try Relay.openStore(in: directory)
        let (device, _) = try await store.enroll(now: clock.now)
        try await store.register(token: token, topic: topic, device: device, now: clock.now)
        let owner = try #require(try await store.tokenOwner(token))
        _ = try await store.commit([push(owner, id: "a"), push(owner, id: "b")], now: clock.now, connected: { _ in true })
        let hub = DeviceHub()
        let session = UplinkSession(
            device: device, node: "n1", store: store, hub: hub, metrics: RelayMetrics(), clock: clock,
            logger: Logger(label: "test"))
        let writer = RecordingWriter()
        let inbox = SessionInbox()
        let ends = Count()
        try await session.start(inbox: inbox, writer: writer) { ends.add() }

        #expect(try await eventually { writer.pushIDs == ["a", "b"] })
        let first = try #require(writer.lines.first)
        #expect(UplinkFrame.decode(Array(first.utf8)) == .ready(device: device))
        #expect(hub.isConnected(device))
        // A push committed later is sent when the hub rings the session, while rounds keep
        // coming (keep-alives posted meanwhile, each echo a slow write): never two at once.
        _ = try await store.commit([push(owner, id: "c")], now: clock.now, connected: { _ in true })
        hub.ring([device])
        for _ in 0..<20 {
            inbox.post(line: [])
            for _ in 0..<100 { await Task.yield() }
        }
        #expect(try await eventually { writer.pushIDs == ["a", "b", "c"] })
        #expect(try await eventually { writer.lines.filter(\.isEmpty).count == 20 })
        #expect(!writer.overlapped)
        // The device acknowledges them: delivered in the store.
        let sent = try await store.pushLog()
        for entry in sent { inbox.acknowledge(entry.seq) }
        #expect(try await eventually { try await store.pushCounts()[.delivered] == 3 })
        // The device hangs up: the session ends once, off the hub, and nobody takes what
        // arrives after (no round runs again).
        inbox.post(.ended)
        #expect(try await eventually { ends.value == 1 })
        #expect(writer.finished == 1)
        #expect(!hub.isConnected(device))
        inbox.post(.ended)
        inbox.ring()
        #expect(inbox.backlog == 1 && ends.value == 1)
    }

    @Test func aSessionThatCannotSayReadyDoesNotStart() async throws {
        let clock = ManualClock()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rounds-\(UUID().uuidString)").path
        let store = try Relay.openStore(in: directory)
        let hub = DeviceHub()
        let (device, _) = try await store.enroll(now: clock.now)
        let metrics = RelayMetrics()
        let session = UplinkSession(
            device: device, node: "n1", store: store, hub: hub, metrics: metrics, clock: clock,
            logger: Logger(label: "test"))
        let inbox = SessionInbox()
        await #expect(throws: RecordingWriter.Refused.self) {
            try await session.start(inbox: inbox, writer: RecordingWriter(failing: true)) {}
        }
        // Off the hub; what arrives is left untaken, no round runs.
        #expect(!hub.isConnected(device))
        inbox.ring()
        inbox.post(line: [])
        #expect(inbox.backlog == 1)
    }
}
