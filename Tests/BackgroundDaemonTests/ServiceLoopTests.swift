import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Logging
import Synchronization
import Testing

@testable import BackgroundDaemon

/// bgd's service loops wait in time that really passes for what is not a calendar date — the
/// pause after a failed pass, the interval between two pruning passes — so a wall clock set back
/// meanwhile (an NTP step, a user) does not stretch them. Before, both were wall-clock dates: a
/// clock set back a day put the scheduler's, the task dispatcher's or the pruner's next pass a day
/// away.
@Suite(.timeLimit(.minutes(1)))
struct ServiceLoopTests {
    let day = Duration.seconds(86400)

    @Test func aFailedPassIsTriedAgainAfterAPauseWhateverTheClockIsSetTo() async throws {
        struct Failure: Error {}
        let clock = ManualClock()
        let passes = Atomic(0)
        let loop = Task {
            await Doorbell().serve("test", on: clock, logger: Logger(label: "test")) { () async throws -> Date? in
                if passes.add(1, ordering: .relaxed).newValue == 1 { throw Failure() }
                return nil  // then only when rung
            }
        }
        defer { loop.cancel() }
        #expect(await eventually { passes.load(ordering: .relaxed) == 1 && clock.sleeperCount == 1 })

        clock.jump(by: day * -1)
        clock.advance(by: .seconds(1))
        #expect(await eventually { passes.load(ordering: .relaxed) == 2 }, "tried again a second on")
    }

    @Test func thePrunerPassesEveryIntervalWhateverTheClockIsSetTo() async throws {
        let clock = ManualClock()
        let store = try BackgroundStore.open(atPath: TemporaryDirectory.make() + "/bgd.sqlite", durability: .normal)
        let app = AppID(rawValue: "com.example.pruned")!
        _ = try await store.register(
            RegisterAppRequest(id: app, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum),
            tokenHash: "hash", now: clock.now)
        let pruner = HistoryPruner(
            store: store, configuration: .init(interval: .seconds(3600)), clock: clock, logger: Logger(label: "test"))
        let loop = Task { try await pruner.run() }
        defer { loop.cancel() }
        #expect(await eventually { clock.sleeperCount == 1 }, "the first pass is over")

        // The clock is set back a day; an open from long before (past the opens' retention)
        // waits to be pruned.
        clock.jump(by: day * -1)
        _ = try await store.recordOpen(of: app, at: clock.now.adding(day * -365))
        clock.advance(by: .seconds(3600))
        #expect(
            try await eventuallyAsync { try await store.opens(of: app).isEmpty },
            "the next pass comes an hour on, not a day and an hour")
    }
}
