import BackgroundDaemon
import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Logging
import Testing

/// A wall clock stepped forward (by mistake, or set right on a device that booted in the past)
/// prunes nothing for the days it skipped: what was stamped before the step ages by the time
/// that really passed. Before, the first pass after a step of 100 days deleted every open and
/// every run beyond the app's latest, and setting the clock back brought none of it back.
@Suite(.timeLimit(.minutes(2)))
struct ClockStepPruningTests {
    let start = Date(timeIntervalSince1970: 1_767_571_200)
    let day = Duration.seconds(86400)
    let app = AppID(rawValue: "com.example.stepped")!

    @Test func aClockSetForwardPrunesOnlyForTheTimeThatPassed() async throws {
        let clock = ManualClock(now: start)
        let store = try BackgroundStore.open(atPath: TemporaryDirectory.make() + "/bgd.sqlite", durability: .normal)
        _ = try await store.register(
            RegisterAppRequest(id: app, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum),
            tokenHash: "hash", now: start)
        for hour in 1...10 {
            let at = start.addingTimeInterval(Double(hour - 11) * 3600)
            let run = try await store.startRun(
                .fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30), now: at)
            _ = try await store.finishRun(run.id, outcome: .newData, now: at.addingTimeInterval(10))
            _ = try await store.recordOpen(of: app, at: at)
        }
        let pruner = HistoryPruner(
            store: store, configuration: .init(retention: .init(runsKeptPerApp: 2)), clock: clock,
            logger: Logger(label: "test"))
        func kept() async throws -> (runs: Int, opens: Int) {
            (try await store.runs(of: app, limit: 100).count, try await store.opens(of: app).count)
        }

        clock.jump(by: day * 100)
        try await pruner.pass()
        #expect(try await kept() == (10, 10), "nothing is older than a day by the time that passed")
        // bgd restarts (an upgrade, a reboot) a day on: the step is remembered. Before, it was
        // held in memory only, and the new bgd's first pass pruned as 100 days old every open
        // and every run stamped before it.
        clock.advance(by: day)
        let restarted = HistoryPruner(
            store: store, configuration: .init(retention: .init(runsKeptPerApp: 2)), clock: clock,
            logger: Logger(label: "test"))
        try await restarted.pass()
        #expect(try await kept() == (10, 10), "a restart does not forget the step")
        _ = try await store.recordOpen(of: app, at: clock.now)  // an open the new clock stamps
        try await pruner.pass()
        #expect(try await kept() == (10, 11))

        // The month the runs are kept, really passed: they go (but the app's latest two), and
        // the opens stay their three months.
        clock.advance(by: day * 31)
        try await pruner.pass()
        #expect(try await kept() == (2, 11))
        // Three months really passed: the opens go, those stamped before the step and the one
        // after alike (the step holds nothing for longer than that).
        clock.advance(by: day * 60)
        try await pruner.pass()
        #expect(try await kept() == (2, 0))
    }
}
