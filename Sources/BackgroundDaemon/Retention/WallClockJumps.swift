import BackgroundModel
import Foundation
import Synchronization

/// How far the wall clock jumped ahead of the time that really passed (`WallClock.elapsed`)
/// since the last look. A device with no battery-backed clock boots in the past and is set
/// right by NTP later, `now` moving by days while seconds pass: what was stamped before that
/// is days older by the new clock than it is. (Time asleep counts as passed: `elapsed` runs on
/// while suspended, so a laptop's night is not a jump.)
final class WallClockJumps: Sendable {
    private let clock: any WallClock
    private let last: Mutex<(now: Date, elapsed: Duration)>

    /// Less than this is drift, NTP's slewing or the moment between reading the two clocks.
    static let tolerance: TimeInterval = 60

    init(clock: any WallClock) {
        self.clock = clock
        last = Mutex((clock.now, clock.elapsed))
    }

    /// Seconds the wall clock was set forward since the last call (or since this was made);
    /// 0 when it kept time or was set back.
    func forwardJump() -> TimeInterval {
        let (now, elapsed) = (clock.now, clock.elapsed)
        return last.withLock { last in
            defer { last = (now, elapsed) }
            let jump = now.timeIntervalSince(last.now) - (elapsed - last.elapsed).seconds
            return jump > Self.tolerance ? jump : 0
        }
    }
}
