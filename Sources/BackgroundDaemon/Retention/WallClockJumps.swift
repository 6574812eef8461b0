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
/// Each jump is remembered as a step for `StampAges`, until `remembered` has really passed since;
/// `steps` and `restore` carry them across a restart (the store keeps them): a restart
/// within the months after a step forgot it, and its first pass pruned as old everything
/// stamped before the step.
final class WallClockJumps: Sendable {
    private let clock: any WallClock
    private let remembered: Duration
    /// The last look, the steps, whether those a bgd before saved are back (`restore`),
    /// whether the store holds the steps as they are, and the jumps whose events are not yet
    /// carried forward.
    private let last:
        Mutex<(now: Date, elapsed: Duration, steps: [Step], restored: Bool, saved: Bool, uncarried: [Jump])>

    private struct Step {
        var before: Date
        /// `elapsed` at the step, and the wall clock then (saved: `elapsed` restarts with bgd).
        var at: Duration
        var seenAt: Date
    }

    /// The most steps remembered (the oldest go first): a clock that steps back and forth at
    /// every pass adds a condition to every pruning query for each.
    static let stepsKept = 64

    /// Less than this is drift, NTP's slewing or the moment between reading the two clocks.
    static let tolerance: TimeInterval = 60

    init(clock: any WallClock, remembered: Duration = .zero) {
        self.clock = clock
        self.remembered = remembered
        last = Mutex((clock.now, clock.elapsed, [], false, true, []))
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
            last.steps.append(Step(before: now.addingTimeInterval(-jump), at: elapsed, seenAt: now))
            last.steps = Array(last.steps.suffix(Self.stepsKept))
            last.saved = false  // until the store holds this step too
            last.uncarried.append(Jump(before: now.addingTimeInterval(-jump), seconds: jump))
            return jump
        }
    }

    /// The steps remembered, to save.
    var steps: [WallClockStep] {
        last.withLock { $0.steps.map { WallClockStep(before: $0.before, seenAt: $0.seenAt) } }
    }

    /// A forward jump: the wall clock's reading before it, and by how much.
    struct Jump: Equatable {
        var before: Date
        var seconds: TimeInterval
    }

    /// The forward jumps whose open events are not yet carried forward, oldest first (a carry
    /// the store did not take is tried again at the next pass, with the jump's own cutoff).
    var uncarried: [Jump] { last.withLock { $0.uncarried } }
    func markCarried(_ jump: Jump) { last.withLock { $0.uncarried.removeAll { $0 == jump } } }

    /// Whether `restore` has run (a pruner takes back the saved steps at its first pass).
    var isRestored: Bool { last.withLock { $0.restored } }

    /// Whether the store holds the steps as they are (a save that failed is tried again).
    var isSaved: Bool { last.withLock { $0.saved } }
    func markSaved(_ done: Bool) { last.withLock { $0.saved = done } }

    /// Takes back steps a bgd before this one saved, each as long ago as it really was: the wall
    /// time since it was seen, less the jumps of the steps after it.
    func restore(_ steps: [WallClockStep]) {
        let (now, elapsed) = (clock.now, clock.elapsed)
        last.withLock { last in
            let known = Set(last.steps.map(\.seenAt))
            let ordered = steps.sorted { $0.seenAt < $1.seenAt }
            for (index, step) in ordered.enumerated() where !known.contains(step.seenAt) {
                let skipped = ordered[(index + 1)...].reduce(0) { $0 + max(0, $1.seenAt.timeIntervalSince($1.before)) }
                let ago = Duration.seconds(max(0, now.timeIntervalSince(step.seenAt) - skipped))
                guard ago < remembered else { continue }
                last.steps.append(Step(before: step.before, at: elapsed - ago, seenAt: step.seenAt))
            }
            last.steps.sort { $0.at < $1.at }
            last.steps = Array(last.steps.suffix(Self.stepsKept))
            last.restored = true
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
