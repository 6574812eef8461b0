import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

@testable import BackgroundRelay

/// The bound on a session's writes (`StallBoundWriter`): the response's end is bounded as a write
/// is, and a write's timer (`StallWatch`) against the write itself, when both end at the limit:
/// which came first is settled once, so a write that ended is not cut (nor counted) by a timer
/// whose sleep had already returned, and a timer that settled first cuts once.
struct StallBoundWriterTests {
    /// Ending an HTTP/2 response waits on the stream's flow control as a write does: a device
    /// that takes nothing holds it until the limit, then the connection is cut.
    @Test func anEndTheDeviceNeverTakesIsCutAtTheLimit() async throws {
        let (clock, writer, cuts) = (ManualClock(), SessionRoundsTests.StallingWriter(), SessionRoundsTests.Count())
        let bounded = StallBoundWriter(base: writer, limit: .seconds(60), clock: clock) {
            cuts.add()
            writer.cut()
        }
        let ending = Task { try await bounded.finish(nil) }
        #expect(try await SessionRoundsTests().eventually { writer.isWaiting && clock.sleeperCount == 1 })
        clock.advance(by: .seconds(59))
        #expect(clock.sleeperCount == 1 && cuts.value == 0, "cut before its limit")
        clock.advance(by: .seconds(1))
        #expect(try await SessionRoundsTests().eventually { cuts.value == 1 }, "not cut at the limit")
        if cuts.value == 0 { writer.cut() }  // the end would wait for good
        await #expect(throws: SessionRoundsTests.StallingWriter.Cut.self) { try await ending.value }
    }

    /// The limit passes, and the write ends before the timer goes on: no cut.
    @Test func aWriteThatEndsAsTheLimitPassesIsNotCut() async throws {
        let (clock, cuts) = (GatedClock(), SessionRoundsTests.Count())
        let watch = StallWatch(limit: .seconds(60), clock: clock) { cuts.add() }
        #expect(try await runUntilParked(clock), "the timer did not reach its limit")
        watch.writeEnded()
        clock.openGate()
        await watch.timerEnded()
        #expect(cuts.value == 0, "a write that had ended was cut")
    }

    /// The limit passes and the timer goes on before the write ends: one cut, and the write's
    /// end after it changes nothing.
    @Test func aTimerThatGoesOnFirstCutsOnce() async throws {
        let (clock, cuts) = (GatedClock(), SessionRoundsTests.Count())
        let watch = StallWatch(limit: .seconds(60), clock: clock) { cuts.add() }
        #expect(try await runUntilParked(clock), "the timer did not reach its limit")
        clock.openGate()
        await watch.timerEnded()
        watch.writeEnded()
        #expect(cuts.value == 1)
    }

    /// Moves the clock to the limit once the timer sleeps, and returns once its sleep has
    /// returned and it waits at the gate.
    func runUntilParked(_ clock: GatedClock) async throws -> Bool {
        let waits = SessionRoundsTests()
        guard try await waits.eventually({ clock.manual.sleeperCount == 1 }) else { return false }
        clock.manual.advance(by: .seconds(60))
        return try await waits.eventually { clock.isParked }
    }
}
