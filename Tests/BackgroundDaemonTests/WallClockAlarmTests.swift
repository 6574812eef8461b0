import BackgroundDaemon
import BackgroundModel
import Foundation
import Testing

/// bgd's wall clock sleeps on one alarm thread (timerfds) instead of napping every minute. These
/// tests are about a real clock, so they use real, short deadlines.
@Suite(.timeLimit(.minutes(1)))
struct WallClockAlarmTests {
    actor Order {
        var woken: [Int] = []
        func append(_ index: Int) { woken.append(index) }
    }

    @Test func sleepersWakeAtTheirDeadlinesInOrder() async throws {
        let clock = SystemClock.withAlarm()
        #expect(clock.sleepUntil != nil, "Linux has the alarm: no naps")
        let start = clock.now
        let woken = Order()
        try await withThrowingTaskGroup(of: Void.self) { group in
            // The later deadline first, so the earlier one must re-arm the alarm.
            for (index, offset) in [(2, 0.30), (1, 0.10), (3, 0.50)] {
                group.addTask {
                    try await clock.sleep(until: start.addingTimeInterval(offset))
                    #expect(clock.now >= start.addingTimeInterval(offset), "never early")
                    await woken.append(index)
                }
            }
            try await group.waitForAll()
        }
        #expect(await woken.woken == [1, 2, 3])
        #expect(clock.now.timeIntervalSince(start) < 5, "and not much late")
    }

    @Test func aPastDeadlineReturnsAtOnce() async throws {
        let clock = SystemClock.withAlarm()
        let before = ContinuousClock.now
        try await clock.sleep(until: clock.now.addingTimeInterval(-60))
        #expect(ContinuousClock.now - before < .seconds(1))
    }

    @Test func cancellingASleeperEndsItsSleep() async throws {
        let clock = SystemClock.withAlarm()
        let sleeper = Task { try await clock.sleep(until: clock.now.addingTimeInterval(3600)) }
        let before = ContinuousClock.now
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value }
        #expect(ContinuousClock.now - before < .seconds(5))
        // The alarm still serves the next sleeper.
        let start = clock.now
        try await clock.sleep(until: start.addingTimeInterval(0.05))
        #expect(clock.now >= start.addingTimeInterval(0.05))
    }
}
