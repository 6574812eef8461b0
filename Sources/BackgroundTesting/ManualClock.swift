import BackgroundModel
import Foundation
import Synchronization

/// A wall clock that moves only when a test says so. Sleepers wake when `advance(by:)` or
/// `advance(to:)` passes their deadline; nothing ever waits for real time.
public final class ManualClock: WallClock {
    private struct Sleeper {
        var deadline: Date
        var continuation: CheckedContinuation<Void, any Error>
    }
    private struct State {
        var now: Date
        var sleepers: [UUID: Sleeper] = [:]
    }
    private let state: Mutex<State>

    /// Starts at `now`; by default a fixed, readable instant (2026-01-05 09:00 UTC, a Monday).
    public init(now: Date = Date(timeIntervalSince1970: 1_767_603_600)) { state = Mutex(State(now: now)) }

    public var now: Date { state.withLock { $0.now } }

    public func sleep(until deadline: Date) async throws {
        let id = UUID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let outcome = state.withLock { state -> Result<Void, any Error>? in
                    if Task.isCancelled { return .failure(CancellationError()) }
                    if deadline <= state.now { return .success(()) }
                    state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
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

    /// Sets the time (backwards too: a wall clock can jump) and wakes the sleepers now due.
    public func advance(to date: Date) {
        let due = state.withLock { state -> [Sleeper] in
            state.now = date
            let due = state.sleepers.filter { $0.value.deadline <= date }
            for id in due.keys { state.sleepers[id] = nil }
            return Array(due.values)
        }
        for sleeper in due { sleeper.continuation.resume() }
    }

    /// How many tasks are sleeping on this clock.
    public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

    /// The earliest deadline any sleeper waits for.
    public var nextDeadline: Date? { state.withLock { $0.sleepers.values.map(\.deadline).min() } }
}
