import BackgroundModel
import BackgroundStore
import Foundation
import Synchronization

/// How far the wall clock jumped ahead of the time that really passed (`WallClock.elapsed`)
/// since the last look. A device with no battery-backed clock boots in the past and is set
/// right by NTP later, `now` moving by days while seconds pass: what was stamped before that
/// is days older by the new clock than it is. (Time asleep counts as passed: `elapsed` runs on
/// while suspended, so a laptop's night is not a jump.)
///
/// Each jump is remembered as a step for `StampAges`, until `remembered` has really passed since.
final class WallClockJumps: Sendable {
    private let clock: any WallClock
    private let remembered: Duration
    private let last: Mutex<(now: Date, elapsed: Duration, steps: [(before: Date, at: Duration)])>

    /// Less than this is drift, NTP's slewing or the moment between reading the two clocks.
    static let tolerance: TimeInterval = 60

    init(clock: any WallClock, remembered: Duration = .zero) {
        self.clock = clock
        self.remembered = remembered
        last = Mutex((clock.now, clock.elapsed, []))
    }

    /// Seconds the wall clock was set forward since the last call (or since this was made);
    /// 0 when it kept time or was set back.
    func forwardJump() -> TimeInterval {
        let (now, elapsed) = (clock.now, clock.elapsed)
        return last.withLock { last in
            let jump = now.timeIntervalSince(last.now) - (elapsed - last.elapsed).seconds
            last.now = now
            last.elapsed = elapsed
            last.steps.removeAll { elapsed - $0.at >= remembered }
            guard jump > Self.tolerance else { return 0 }
            // When in the time since the last look the step came is not known: say just now, the
            // latest it can have been, which makes the most of the stamps before it younger.
            last.steps.append((before: now.addingTimeInterval(-jump), at: elapsed))
            return jump
        }
    }

    /// The ages of stamps by the wall clock now, across the steps forward seen (at the last
    /// `forwardJump`) in the last `remembered`.
    func ages() -> StampAges {
        let (now, elapsed) = (clock.now, clock.elapsed)
        return StampAges(
            now: now,
            steps: last.withLock { last in
                last.steps.map { StampAges.ForwardStep(before: $0.before, since: elapsed - $0.at) }
            })
    }
}
