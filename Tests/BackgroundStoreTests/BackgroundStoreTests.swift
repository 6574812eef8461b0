import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Testing

struct BackgroundStoreTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)
    let app = AppID(rawValue: "com.example.a")!

    func registered() async throws -> BackgroundStore {
        let store = try BackgroundStore.inMemory()
        _ = try await store.register(
            RegisterAppRequest(id: app, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum),
            tokenHash: "h", now: now)
        return store
    }

    /// `--durability full` is an fsync at every commit, on the connection that commits (GRDB's
    /// pool had quietly put its writer back to NORMAL).
    @Test func durabilityIsWhatTheWriterDoes() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("bgd-sync-\(UUID().uuidString)")
            .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        #expect(
            try await BackgroundStore.open(atPath: directory + "/full.sqlite", durability: .full).writerSynchronous()
                == 2)
        #expect(
            try await BackgroundStore.open(atPath: directory + "/normal.sqlite", durability: .normal)
                .writerSynchronous() == 1)
    }

    @Test func aSecondRegistrationOfAnIdIsRefused() async throws {
        let store = try await registered()
        await #expect(throws: StoreError.appAlreadyRegistered(app)) {
            _ = try await store.register(
                RegisterAppRequest(id: app, launchCommand: LaunchCommand(["/bin/false"])!), tokenHash: "other", now: now
            )
        }
        #expect(try await store.app(app)?.launchCommand.program == "/bin/true")
    }

    @Test func startingARunQueuesItsEventInTheSameTransaction() async throws {
        let store = try await registered()
        // When
        let run = try await store.startRun(
            .fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30), now: now)
        let event = try #require(try await store.openEvents(for: app).last)
        // Then
        #expect(event.seq == EventSequence(1))
        #expect(event.body == .fetch(run: run.id, budget: .seconds(30)))
        #expect(try await store.openEvents(for: app) == [event])
        #expect(run.deadline == now.addingTimeInterval(30))
    }

    @Test func onlyOneRunIsInFlightPerApp() async throws {
        let store = try await registered()
        _ = try await store.startRun(.fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30), now: now)
        await #expect(throws: StoreError.runAlreadyInFlight(app)) {
            _ = try await store.startRun(
                .fetch, for: app, trigger: .manual, reasons: [], budget: .seconds(30), now: now)
        }
        #expect(try await store.openEvents(for: app).count == 1)
        #expect(try await store.lastEventSequence(for: app) == EventSequence(1))
    }

    @Test func theFirstOutcomeStandsAndSettlesTheEvent() async throws {
        let store = try await registered()
        let run = try await store.startRun(
            .fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30), now: now)
        let first = try await store.finishRun(run.id, outcome: .expired, now: now.addingTimeInterval(30))
        let second = try await store.finishRun(run.id, outcome: .newData, now: now.addingTimeInterval(31))
        #expect(first?.outcome == .expired)
        #expect(second == nil)
        #expect(try await store.run(run.id)?.outcome == .expired)
        #expect(try await store.openEvents(for: app).isEmpty)
        #expect(try await store.outbox(for: app).map(\.closedBy) == ["runEnded"])
    }

    @Test func acknowledgementIsCumulativeAndIdempotent() async throws {
        let store = try await registered()
        for offset in 0..<3 {
            let run = try await store.startRun(
                .fetch, for: app, trigger: .manual, reasons: [], budget: .seconds(30),
                now: now.addingTimeInterval(Double(offset)))
            // Keep events open: end the run without settling by acknowledging out of band below.
            if offset < 2 { try await store.finishRun(run.id, outcome: .newData, now: now) }
        }
        #expect(try await store.openEvents(for: app).map(\.seq.rawValue) == [3])
        #expect(try await store.acknowledge(upTo: EventSequence(3), for: app, now: now) == 1)
        #expect(try await store.acknowledge(upTo: EventSequence(3), for: app, now: now) == 0)
        #expect(try await store.openEvents(for: app).isEmpty)
    }

    @Test func runsInFlightAtRestartAreClosedAsInterrupted() async throws {
        // Given a file store with a run in flight, as a killed bgd leaves it
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/bgd.sqlite"
        do {
            let store = try BackgroundStore.open(atPath: path)
            _ = try await store.register(
                RegisterAppRequest(id: app, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum),
                tokenHash: "h", now: now)
            let run = try await store.startRun(
                .fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30), now: now)
            try await store.recordLaunch(of: run.id, processID: 4242, startTicks: 99)
        }
        // When it is reopened
        let reopened = try BackgroundStore.open(atPath: path)
        #expect(try await reopened.journalMode() == "wal")
        #expect(try await reopened.writerSynchronous() == 2, "durability full: an fsync at every commit")
        let interrupted = try await reopened.closeInterruptedRuns(now: now.addingTimeInterval(5))
        // Then
        #expect(interrupted.map(\.run.outcome) == [.interrupted])
        #expect(interrupted.first?.processID == 4242)
        #expect(interrupted.first?.startTicks == 99)
        #expect(try await reopened.openEvents(for: app).isEmpty)
        #expect(try await reopened.fetchCandidates().first?.isRunning == false)
        #expect(try await reopened.closeInterruptedRuns(now: now).isEmpty)
        #expect(try await reopened.integrityCheck() == "ok")
    }

    @Test func unregisteringRemovesHistoryAndOutbox() async throws {
        let store = try await registered()
        _ = try await store.startRun(.fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30), now: now)
        try await store.recordOpen(of: app, at: now)
        let token = try await store.deviceToken(for: app, makingWith: { String(repeating: "b", count: 64) }, now: now)
        #expect(try await store.unregister(app, now: now))
        #expect(try await store.unregister(app, now: now) == false)
        // Its device token is revoked in the same transaction (a push to it answers 410).
        #expect(try await store.deviceTokenOwner(token.token)?.revokedAt == now)
        #expect(try await store.runsInFlight().isEmpty)
        await #expect(throws: StoreError.appNotFound(app)) { try await store.recordOpen(of: app, at: now) }
    }

    @Test func candidatesCarryRecentOutcomesNewestFirst() async throws {
        let store = try await registered()
        for (offset, outcome) in [(0.0, RunOutcome.newData), (60, .failed), (120, .expired)] {
            let run = try await store.startRun(
                .fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30),
                now: now.addingTimeInterval(offset))
            try await store.finishRun(run.id, outcome: outcome, now: now.addingTimeInterval(offset + 1))
        }
        let candidate = try #require(try await store.fetchCandidates().first)
        #expect(candidate.recentRuns.map(\.outcome) == [.expired, .failed, .newData])
        #expect(candidate.interval == .minimum)
    }

    /// The policy's "last run" is the last one started, even when the clock that stamped an
    /// earlier one was days ahead: otherwise that run stays "last" and an interrupted one is
    /// made up again after every run (a burst of fetches once the clock came back).
    @Test func theLastRunIsTheLastStartedWhateverTheClockSaid() async throws {
        let store = try await registered()
        let ahead = now.addingTimeInterval(2 * 86400)
        let early = try await store.startRun(
            .fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30), now: ahead)
        _ = try await store.closeInterruptedRuns(now: ahead)
        let late = try await store.startRun(
            .fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30), now: now)
        try await store.finishRun(late.id, outcome: .newData, now: now.addingTimeInterval(1))
        let candidate = try #require(try await store.fetchCandidates().first)
        #expect(candidate.recentRuns.map(\.id) == [late.id, early.id])
        #expect(candidate.recentRuns.first?.outcome == .newData)
    }
}
