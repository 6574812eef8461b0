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
    /// one to start meanwhile, would be seen writing too); writes past `failAfter` fail.
    final class RecordingWriter: ResponseBodyWriter, @unchecked Sendable {
        struct State {
            var lines: [String] = []
            var writing = 0
            var overlapped = false
            var finished = 0
        }
        let state = Mutex(State())
        /// Writes that succeed before every later one fails (nil: none fails).
        let failAfter: Int?

        init(failAfter: Int? = nil) { self.failAfter = failAfter }

        struct Refused: Error {}

        func write(_ buffer: ByteBuffer) async throws {
            try state.withLock {
                if let failAfter, $0.lines.count >= failAfter { throw Refused() }
            }
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

    /// A connection whose device stops reading: `ready` goes out, every later write — and the
    /// response's end — waits until the connection is cut, and then fails.
    final class StallingWriter: ResponseBodyWriter, Sendable {
        private struct State {
            var written = 0
            var waiting: CheckedContinuation<Void, any Error>?
            var cut = false
        }
        private let state = Mutex(State())

        struct Cut: Error {}

        func write(_ buffer: ByteBuffer) async throws {
            let first = state.withLock { state in
                state.written += 1
                return state.written == 1 && !state.cut
            }
            if !first { try await stall() }
        }

        func finish(_ trailingHeaders: HTTPFields?) async throws { try await stall() }

        /// Waits until the connection is cut, then fails (at once if it was).
        private func stall() async throws {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let cut = state.withLock { state in
                    if !state.cut { state.waiting = continuation }
                    return state.cut
                }
                if cut { continuation.resume(throwing: Cut()) }
            }
        }

        /// The connection closes: the waiting write fails.
        func cut() {
            let waiting = state.withLock { state in
                state.cut = true
                defer { state.waiting = nil }
                return state.waiting
            }
            waiting?.resume(throwing: Cut())
        }

        var isWaiting: Bool { state.withLock { $0.waiting != nil } }
        var wasCut: Bool { state.withLock { $0.cut } }
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

    /// Waits for what a round does in its own task (a store call, a write), yielding instead of
    /// sleeping, for up to 2 minutes of real time: in the first minute of a full `swift test`,
    /// with every suite starting its daemons at once on two cores, 30 s once passed before the
    /// session had written its first line.
    func eventually(_ condition: () async throws -> Bool) async throws -> Bool {
        let deadline = ContinuousClock.now.advanced(by: .seconds(120))
        while ContinuousClock.now < deadline {
            if try await condition() { return true }
            await Task.yield()
        }
        return try await condition()
    }

    /// A SQLite store in a directory of its own, removed after `body`.
    func withStore(_ body: (any RelayStore) async throws -> Void) async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("rounds-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await body(try Relay.openStore(in: directory))
    }

    @Test func aStartedSessionSendsWhatIsPendingTakesAcknowledgementsAndEndsOnce() async throws {
        try await withStore { store in
        let clock = ManualClock()
        let (device, _) = try await store.enroll(now: clock.now)
        try await store.register(token: token, topic: topic, device: device, now: clock.now)
        let owner = try #require(try await store.tokenOwner(token))
        _ = try await store.commit([push(owner, id: "a"), push(owner, id: "b")], now: clock.now, connected: { _ in true })
        let hub = DeviceHub()
        let rounds = Count()
        let session = UplinkSession(
            device: device, node: "n1", store: store, hub: hub, metrics: RelayMetrics(), clock: clock,
            logger: Logger(label: "test"), writeLimit: .seconds(60), activity: { rounds.add() })
        let writer = RecordingWriter()
        let inbox = SessionInbox()
        let ends = Count()
        try await session.start(inbox: inbox, writer: writer, cut: {}) { ends.add() }

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
        // Every round is activity (bgrelay's code pages stay while its devices talk).
        #expect(rounds.value >= 2, "\(rounds.value) rounds noted")
        // Sent is not delivered: only the device's acknowledgements are.
        #expect(try await store.pushCounts()[.delivered] == nil)
        // The device acknowledges them: delivered in the store.
        let sent = try await store.pushLog()
        for entry in sent { inbox.acknowledge(entry.seq) }
        #expect(try await eventually { try await store.pushCounts()[.delivered] == 3 })
        // The device hangs up: the session ends once, off the hub, and nobody listens to the
        // inbox any more (no round can run again).
        #expect(inbox.isListened)
        inbox.post(.ended)
        #expect(try await eventually { ends.value == 1 })
        #expect(writer.finished == 1)
        #expect(!hub.isConnected(device) && !inbox.isListened)
        }
    }

    @Test func aWriteThatFailsEndsTheSessionOnce() async throws {
        try await withStore { store in
        let clock = ManualClock()
        let (device, _) = try await store.enroll(now: clock.now)
        let hub = DeviceHub()
        let session = UplinkSession(
            device: device, node: "n1", store: store, hub: hub, metrics: RelayMetrics(), clock: clock,
            logger: Logger(label: "test"), writeLimit: .seconds(60), activity: {})
        let writer = RecordingWriter(failAfter: 1)  // `ready` goes out; the connection breaks after
        let inbox = SessionInbox()
        let ends = Count()
        try await session.start(inbox: inbox, writer: writer, cut: {}) { ends.add() }
        #expect(hub.isConnected(device))
        inbox.post(line: [])  // a keep-alive: its echo fails
        #expect(try await eventually { ends.value == 1 })
        #expect(!hub.isConnected(device) && !inbox.isListened)
        inbox.post(line: [])
        #expect(ends.value == 1)
        }
    }

    @Test func aSessionThatCannotSayReadyDoesNotStart() async throws {
        try await withStore { store in
        let clock = ManualClock()
        let hub = DeviceHub()
        let (device, _) = try await store.enroll(now: clock.now)
        let session = UplinkSession(
            device: device, node: "n1", store: store, hub: hub, metrics: RelayMetrics(), clock: clock,
            logger: Logger(label: "test"), writeLimit: .seconds(60), activity: {})
        let inbox = SessionInbox()
        await #expect(throws: RecordingWriter.Refused.self) {
            try await session.start(inbox: inbox, writer: RecordingWriter(failAfter: 0), cut: {}) {}
        }
        // Off the hub, and nobody listens: what arrives is left untaken.
        #expect(!hub.isConnected(device) && !inbox.isListened)
        }
    }

    /// A device that stops reading holds its session's write for good, and a held-up session
    /// reads nothing more from its inbox — not the silence check's `silent`, not a takeover — so
    /// it never ended, and its connection held a slot of the connection limits. A write waiting
    /// `writeLimit` cuts the connection, which fails it, and the session ends.
    @Test func aWriteTheDeviceNeverTakesIsCutAtTheLimitAndTheSessionEnds() async throws {
        try await withStore { store in
        let clock = ManualClock()
        let (device, _) = try await store.enroll(now: clock.now)
        let hub = DeviceHub()
        let metrics = RelayMetrics()
        let session = UplinkSession(
            device: device, node: "n1", store: store, hub: hub, metrics: metrics, clock: clock,
            logger: Logger(label: "test"), writeLimit: .seconds(60), activity: {})
        let writer = StallingWriter()
        let inbox = SessionInbox()
        let ends = Count()
        try await session.start(inbox: inbox, writer: writer, cut: { writer.cut() }) { ends.add() }
        inbox.post(line: [])  // a keep-alive: its echo waits
        #expect(try await eventually { writer.isWaiting && clock.sleeperCount == 1 })
        inbox.post(.silent)  // unread while the write waits
        clock.advance(by: .seconds(59))
        // A due sleeper leaves the clock as it moves: the write's timer still sleeping is not cut.
        #expect(clock.sleeperCount == 1 && ends.value == 0 && !writer.wasCut, "cut before its limit")
        clock.advance(by: .seconds(1))
        #expect(try await eventually { ends.value == 1 })
        #expect(writer.wasCut && !hub.isConnected(device) && !inbox.isListened)
        #expect(await metrics.exposition(store: store, hub: hub).contains("bgrelay_uplinks_cut_stalled_total 1"))
        }
    }

    /// The silence check finds a session silent once in its life: the second sweep in a row to
    /// hear nothing, never again after. Before, a session held up by a device that reads nothing
    /// (whose lines the relay then stops reading) was heard now and then and found silent again
    /// and again — counted and logged each time.
    @Test func aSessionIsFoundSilentOnce() {
        let hub = DeviceHub()
        let (talking, silent) = (SessionInbox(), SessionInbox())
        _ = hub.connect("talking", inbox: talking)
        _ = hub.connect("silent", inbox: silent)
        func sweep() -> [String] {
            talking.post(line: [])
            return hub.sweepSilent(limit: 2)
        }
        #expect(sweep() == [] && sweep() == [])
        #expect(sweep() == ["silent"])
        silent.post(line: [])  // heard once after it was found silent, then never again
        #expect(sweep() == [] && sweep() == [])
        #expect(sweep() == [], "found silent a second time")
    }

    /// An HTTP/2 uplink's body that breaks (the device reset its stream, the connection was
    /// lost) ends the session as a close does; only a line too long is said to be one. Before,
    /// every error of the body was reported to the device as "a line longer than 16384 bytes".
    @Test func aBrokenStreamEndsTheSessionAndOnlyALongLineIsSaidToBeOne() async {
        struct Reset: Error {}
        func read(_ chunks: [String], then failure: (any Error)?) async -> [String] {
            let (body, sink) = AsyncThrowingStream<ByteBuffer, any Error>.makeStream()
            for chunk in chunks { sink.yield(ByteBuffer(string: chunk)) }
            sink.finish(throwing: failure)
            let inbox = SessionInbox()
            await UplinkSession.read(body, into: inbox)
            return inbox.take().events.map { event in
                switch event {
                case .keepAlive: "keepAlive"
                case .ended: "ended"
                case .malformed(let text): "malformed: \(text)"
                default: "\(event)"
                }
            }
        }
        #expect(await read(["\n"], then: Reset()) == ["keepAlive", "ended"])
        #expect(
            await read([String(repeating: "x", count: UplinkFrame.maximumLine + 1)], then: nil)
                == ["malformed: a line longer than \(UplinkFrame.maximumLine) bytes", "ended"])
    }
}
