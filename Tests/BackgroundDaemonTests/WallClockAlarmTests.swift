import BackgroundDaemon
import BackgroundModel
import Foundation
import Testing

/// bgd's wall clock sleeps on one alarm thread (timerfds) instead of napping every minute. These
/// tests are about a real clock, so they use real, short deadlines.
@Suite(.timeLimit(.minutes(5)))
struct WallClockAlarmTests {
    @Test func sleepersWakeAtTheirDeadlinesNeverEarly() async throws {
        let clock = SystemClock.withAlarm()
        #expect(clock.sleepUntil != nil, "Linux has the alarm: no naps")
        let start = clock.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            for offset in [0.30, 0.10, 0.50] {
                group.addTask {
                    try await clock.sleep(until: start.addingTimeInterval(offset))
                    #expect(clock.now >= start.addingTimeInterval(offset), "never early")
                }
            }
            try await group.waitForAll()
        }
    }

    /// A sleeper with a nearer deadline than the one the alarm is armed for re-arms it: were it
    /// left behind the first, it would sleep an hour (and the test's time limit would end it).
    @Test func aNearerDeadlineRearmsTheAlarm() async throws {
        let clock = SystemClock.withAlarm()
        let far = Task { try await clock.sleep(until: clock.now.addingTimeInterval(3600)) }
        defer { far.cancel() }
        let start = clock.now
        try await clock.sleep(until: start.addingTimeInterval(0.2))
        #expect(clock.now >= start.addingTimeInterval(0.2))
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
        #expect(ContinuousClock.now - before < .seconds(60), "at once, not in an hour (a loaded run takes seconds)")
        // The alarm still serves the next sleeper.
        let start = clock.now
        try await clock.sleep(until: start.addingTimeInterval(0.05))
        #expect(clock.now >= start.addingTimeInterval(0.05))
    }
}
