import BackgroundModel
import Foundation
import Synchronization

/// A wall clock that moves only when a test says so. Sleepers wake when `advance(by:)` or
/// `advance(to:)` passes their deadline; nothing ever waits for real time.
public final class ManualClock: WallClock {
    private struct Sleeper {
        /// A wall-clock deadline (`sleep(until:)`), or one in time passed (`sleep(for:)`), which
        /// a `jump` does not move.
        enum Deadline {
            case wall(Date)
            case elapsed(Duration)
        }
        var deadline: Deadline
        var continuation: CheckedContinuation<Void, any Error>

        func isDue(now: Date, elapsed: Duration) -> Bool {
            switch deadline {
            case .wall(let date): date <= now
            case .elapsed(let end): end <= elapsed
            }
        }

        /// The wall-clock time it wakes at, were the clock not set meanwhile.
        func wallDeadline(now: Date, elapsed: Duration) -> Date {
            switch deadline {
            case .wall(let date): date
            case .elapsed(let end): now.adding(end - elapsed)
            }
        }
    }
    private struct State {
        var now: Date
        var elapsed: Duration = .zero
        var awake: Duration = .zero
        var sleepers: [UUID: Sleeper] = [:]
    }
    private let state: Mutex<State>

    /// Starts at `now`; by default a fixed, readable instant (2026-01-05 09:00 UTC, a Monday).
    public init(now: Date = Date(timeIntervalSince1970: 1_767_603_600)) { state = Mutex(State(now: now)) }

    public var now: Date { state.withLock { $0.now } }

    /// Grows with every forward `advance`; a `jump` leaves it alone.
    public var elapsed: Duration { state.withLock { $0.elapsed } }

    /// Grows with every forward `advance`; a `jump` and a `suspend` leave it alone.
    public var awake: Duration { state.withLock { $0.awake } }

    public func sleep(until deadline: Date) async throws { try await sleep(.wall(deadline)) }

    /// Wakes once `advance` has moved `elapsed` to `end`; a `jump` of the wall clock meanwhile
    /// does not count (`sleep(for:)` is this from `elapsed` now).
    public func sleep(untilElapsed end: Duration) async throws { try await sleep(.elapsed(end)) }

    private func sleep(_ deadline: Sleeper.Deadline) async throws {
        let id = UUID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome = state.withLock { state -> Result<Void, any Error>? in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    let sleeper = Sleeper(deadline: deadline, continuation: continuation)
                    if sleeper.isDue(now: state.now, elapsed: state.elapsed) { return .success(()) }
                    state.sleepers[id] = sleeper
                    return nil
                }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            let sleeper = state.withLock { $0.sleepers.removeValue(forKey: id) }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves time forward and wakes every sleeper whose deadline has come.
    public func advance(by duration: Duration) { advance(to: now.adding(duration)) }

    /// Sets the time and wakes the sleepers now due. Time going forward has passed (`elapsed`
    /// grows by as much); set backwards, it is a jump of the wall clock.
    public func advance(to date: Date) {
        let passing = date > now
        move(to: date, passing: passing, awake: passing)
    }

    /// The wall clock is set (an NTP step, a user, `faketime`) by `duration`, forwards or back:
    /// `now` moves, `elapsed` does not.
    public func jump(by duration: Duration) { move(to: now.adding(duration), passing: false, awake: false) }

    /// The machine is suspended for `duration` (a laptop's lid closed) and resumes: `now` and
    /// `elapsed` move on by as much, `awake` does not.
    public func suspend(for duration: Duration) {
        move(to: now.adding(duration), passing: duration > .zero, awake: false)
    }

    private func move(to date: Date, passing: Bool, awake: Bool) {
        let due = state.withLock { state -> [Sleeper] in
            if passing { state.elapsed += date.duration(since: state.now) }
            if awake { state.awake += date.duration(since: state.now) }
            state.now = date
            let due = state.sleepers.filter { $0.value.isDue(now: date, elapsed: state.elapsed) }
            for id in due.keys { state.sleepers[id] = nil }
            return Array(due.values)
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    /// How many tasks are sleeping on this clock.
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    /// The earliest deadline any sleeper waits for.
    public var nextDeadline: Date? {
        state.withLock { state in
            state.sleepers.values.map { $0.wallDeadline(now: state.now, elapsed: state.elapsed) }.min()
        }
    }
}
