import BackgroundModel
import BackgroundTesting
import Testing

/// `WallClock.within`, on a clock the test moves: what the relay's store calls are bounded by.
struct WithinTests {
    @Test func anAnswerInTimeIsTheAnswerAndAnErrorIsTheError() async throws {
        let clock = ManualClock()
        #expect(try await clock.within(.seconds(10)) { 42 } == 42)
        await #expect(throws: CancellationError.self) {
            try await clock.within(.seconds(10)) { () async throws -> Int in throw CancellationError() }
        }
        // The timer of a finished call is gone (once its task has run at all).
        #expect(await eventuallyYielding { clock.sleeperCount == 0 })
        for _ in 0..<1_000 { await Task.yield() }
        #expect(clock.sleeperCount == 0)
    }

    /// A caller cancelled while the work ignores it is not held until the limit.
    @Test func aCancelledCallerReturnsAtOnce() async throws {
        let clock = ManualClock()
        let caller = await hangingCall(on: clock)
        caller.cancel()
        await #expect(throws: CancellationError.self) { try await caller.value }
        #expect(clock.now == ManualClock().now)  // no time had to pass
    }

    /// Work that never ends and ignores cancellation (a call on a connection that will never
    /// answer) does not hold its caller past the limit.
    @Test func workThatNeverEndsIsLeftBehindAtTheLimit() async throws {
        let clock = ManualClock()
        let caller = await hangingCall(on: clock)
        clock.advance(by: .seconds(9))
        #expect(clock.sleeperCount == 1)
        clock.advance(by: .seconds(1))
        await #expect(throws: DeadlineExceeded.self) { try await caller.value }
    }

    /// The limit is time that passes, not the wall clock's reading: set back an hour while the
    /// work hangs, the caller still gets its answer when the limit has passed; set forward two
    /// days, it is not cut short.
    @Test func aClockSetBackOrForwardNeitherStretchesNorCutsTheLimit() async throws {
        let clock = ManualClock()
        let caller = await hangingCall(on: clock)
        clock.jump(by: .seconds(-3600))
        clock.jump(by: .seconds(2 * 86400))
        for _ in 0..<1_000 { await Task.yield() }
        #expect(clock.sleeperCount == 1, "a jump of the wall clock ended the wait")
        clock.advance(by: .seconds(10))
        await #expect(throws: DeadlineExceeded.self) { try await caller.value }
    }

    /// `sleep(for:)` on the system clock waits what it is asked, whatever `now` says.
    @Test func theSystemClockSleepsForTimeThatPasses() async throws {
        let clock = SystemClock()
        let before = clock.elapsed
        try await clock.sleep(for: .milliseconds(30))
        #expect(clock.elapsed - before >= .milliseconds(30))
    }

    /// A caller of `within(10 s)` whose work never ends, cancelled or not (a call on a
    /// connection that will never answer) — once its timer is set.
    func hangingCall(on clock: ManualClock) async -> Task<Int, any Error> {
        let caller = Task {
            try await clock.within(.seconds(10)) { () async throws -> Int in
                await withUnsafeContinuation { _ in }
            }
        }
        #expect(await eventuallyYielding { clock.sleeperCount == 1 })
        return caller
    }

    /// Waits for another task's step without sleeping.
    func eventuallyYielding(_ condition: () -> Bool) async -> Bool {
        for _ in 0..<100_000 where !condition() { await Task.yield() }
        return condition()
    }
}
