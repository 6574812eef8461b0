import BackgroundStore
import BackgroundTesting
import Foundation
import Testing

@testable import BackgroundDaemon

/// What the pruner takes for a wall clock set forward (and carries open events over): a jump
/// beyond drift, reported once. Time passing, drift and a clock set back are none.
struct WallClockJumpsTests {
    @Test func onlyAClockSetForwardBeyondDriftIsAJump() {
        let clock = ManualClock()
        let jumps = WallClockJumps(clock: clock)
        clock.advance(by: .seconds(86400))  // a day passing, asleep or not
        #expect(jumps.forwardJump() == 0)
        clock.jump(by: .seconds(59))  // drift, NTP's slewing: under the tolerance
        #expect(jumps.forwardJump() == 0)
        clock.jump(by: .seconds(40 * 86400))
        #expect(jumps.forwardJump() == 40 * 86400)
        #expect(jumps.forwardJump() == 0, "a jump is reported once")
        clock.jump(by: .seconds(-3 * 86400))  // set back
        #expect(jumps.forwardJump() == 0)
        clock.advance(by: .seconds(3600))
        #expect(jumps.forwardJump() == 0, "time passing after a set-back is no jump")
    }

    /// Jumps whose events are not carried yet are kept each with the clock's reading before it:
    /// a carry tried again a pass later moves what was stamped before that jump, not what was
    /// stamped before "now less the jump" (which, a pass later, takes in events stamped after
    /// it), and two jumps are carried one after the other.
    @Test func uncarriedJumpsKeepTheirOwnCutoffs() {
        let clock = ManualClock()
        let jumps = WallClockJumps(clock: clock)
        let first = clock.now
        clock.jump(by: .seconds(40 * 86400))
        _ = jumps.forwardJump()
        clock.advance(by: .seconds(3 * 86400))
        let second = clock.now
        clock.jump(by: .seconds(5 * 86400))
        _ = jumps.forwardJump()
        let older = WallClockJumps.Jump(before: first, seconds: 40 * 86400)
        let newer = WallClockJumps.Jump(before: second, seconds: 5 * 86400)
        #expect(jumps.uncarried == [older, newer])
        jumps.markCarried(older)
        #expect(jumps.uncarried == [newer])
    }

    /// Each jump is a step for the pruner's ages (`StampAges`): the clock's reading before it, and
    /// the time really passed since, until `remembered` has passed.
    @Test func aJumpIsRememberedAsAStepUntilItCannotMatter() {
        let clock = ManualClock()
        let jumps = WallClockJumps(clock: clock, remembered: .seconds(10 * 86400))
        let before = clock.now
        clock.jump(by: .seconds(40 * 86400))
        #expect(jumps.forwardJump() == 40 * 86400)
        #expect(jumps.ages() == StampAges(now: clock.now, steps: [.init(before: before, since: .zero)]))
        clock.advance(by: .seconds(86400))
        #expect(jumps.ages().steps == [.init(before: before, since: .seconds(86400))])
        clock.advance(by: .seconds(9 * 86400))
        _ = jumps.forwardJump()
        #expect(jumps.ages() == StampAges(now: clock.now), "forgotten once the longest age has passed")
    }

    /// Steps a bgd before this one saved come back as long ago as they really were: the wall
    /// time since each was seen, less the later steps' jumps (time that did not pass). Before,
    /// the first of two steps came back 100 days old after two days, and stamps before it were
    /// pruned for time that never passed.
    @Test func savedStepsComeBackAsLongAgoAsTheyReallyWere() {
        let day = 86400.0
        let clock = ManualClock()
        let first = WallClockJumps(clock: clock, remembered: .seconds(300 * day))
        let before40 = clock.now
        clock.jump(by: .seconds(40 * day))
        #expect(first.forwardJump() == 40 * day)
        clock.advance(by: .seconds(day))
        let before100 = clock.now
        clock.jump(by: .seconds(100 * day))
        #expect(first.forwardJump() == 100 * day)
        clock.advance(by: .seconds(day))
        // bgd restarts: its steps come back from the store.
        let next = WallClockJumps(clock: clock, remembered: .seconds(300 * day))
        next.restore(first.steps)
        #expect(
            next.ages().steps == [
                .init(before: before40, since: .seconds(2 * day)), .init(before: before100, since: .seconds(day)),
            ], "\(next.ages().steps)")
    }
}
