import BackgroundModel
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Wakes a sleeping service loop early: a mutex and at most one waiter, rings coalesced.
///
/// A loop calls `wait(until:on:)` between iterations; anyone may `ring()` to make it go round at
/// once (a registration, a run that ended). A ring while nobody waits is kept for the next wait,
/// so none is lost.
public final class Doorbell: Sendable {
    private struct State {
        var rung = false
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())

    public init() {}

    public func ring() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            state.rung = true
            return nil
        }
        waiter?.resume()
    }

    /// Returns when rung, or at `deadline` (nil: only when rung). Throws `CancellationError`
    /// when the task is cancelled.
    public func wait(until deadline: Date?, on clock: any WallClock) async throws {
        guard let deadline else { return try await wait(orAfter: nil) }
        try await wait(orAfter: { try await clock.sleep(until: deadline) })
    }

    /// Returns when rung, or once `duration` has really passed (`WallClock.sleep(for:)`: a clock
    /// set meanwhile neither stretches nor shortens it). Throws `CancellationError` when the
    /// task is cancelled.
    public func wait(for duration: Duration, on clock: any WallClock) async throws {
        try await wait(orAfter: { try await clock.sleep(for: duration) })
    }

    /// Returns when rung, or once the clock's `elapsed` has reached `end`.
    public func wait(untilElapsed end: Duration, on clock: any WallClock) async throws {
        try await wait(orAfter: { try await clock.sleep(untilElapsed: end) })
    }

    /// Returns when rung or when `sleep` returns, whichever comes first (only when rung if there
    /// is no `sleep`).
    private func wait(orAfter sleep: (@Sendable () async throws -> Void)?) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForRing() }
            if let sleep { group.addTask(operation: sleep) }
            defer { group.cancelAll() }
            _ = try await group.next()
        }
        try Task.checkCancellation()
    }

    private func waitForRing() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { state -> Bool in
                    if state.rung || Task.isCancelled {
                        state.rung = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if resumeNow { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}

extension Doorbell {
    /// A service's loop: `iteration` runs, says when to go round again (nil: only when rung),
    /// and the loop waits for that or a ring — until the task is cancelled or bgd shuts down
    /// gracefully.
    ///
    /// An iteration that throws (a full disk, an I/O error) is logged with the service's name and
    /// tried again after a pause that doubles from one second to a minute: one service's trouble
    /// never ends the loop, and so never takes the rest of bgd down with it. The pause is time
    /// that really passes: as a wall-clock date, a clock set back a day meanwhile put the next
    /// try a day away.
    func serve(
        _ name: String, on clock: any WallClock, logger: Logger,
        _ iteration: @escaping @Sendable () async throws -> Date?
    ) async {
        await serve(name, on: clock, logger: logger, looking: { NextLook(at: try await iteration()) })
    }

    /// The same loop for a service whose iteration says when on the clock's `elapsed` to go
    /// round again rather than at what wall-clock time (a run's budget): time that really
    /// passes, which a wall clock set meanwhile neither stretches nor shortens.
    func serve(
        _ name: String, on clock: any WallClock, logger: Logger,
        untilElapsed iteration: @escaping @Sendable () async throws -> Duration?
    ) async {
        await loop(
            name, logger: logger, iteration, retryingAfter: { clock.elapsed + $0 },
            waiting: { next in
                if let next {
                    try await self.wait(untilElapsed: next, on: clock)
                } else {
                    try await self.wait(until: nil, on: clock)
                }
            })
    }

    /// When a loop whose waits are of both kinds looks again: at a wall-clock time (a calendar
    /// deadline), once `elapsed` reaches a point (a retry's wait, time that really passes), or
    /// whichever comes first. Said as a date alone, a wait of the second kind was stretched by
    /// as much as the clock was set back meanwhile.
    struct NextLook: Sendable {
        var at: Date?
        var elapsed: Duration?
    }

    /// The same loop for a service whose iteration says when to look again in both kinds of time.
    func serve(
        _ name: String, on clock: any WallClock, logger: Logger,
        looking iteration: @escaping @Sendable () async throws -> NextLook
    ) async {
        await loop(
            name, logger: logger, { Optional(try await iteration()) },
            retryingAfter: { NextLook(at: nil, elapsed: clock.elapsed + $0) },
            waiting: { next in
                let (at, elapsed) = (next?.at, next?.elapsed)
                guard at != nil || elapsed != nil else { return try await self.wait(until: nil, on: clock) }
                try await self.wait(orAfter: {
                    try await withThrowingTaskGroup(of: Void.self) { sleeps in
                        if let at { sleeps.addTask { try await clock.sleep(until: at) } }
                        if let elapsed { sleeps.addTask { try await clock.sleep(untilElapsed: elapsed) } }
                        defer { sleeps.cancelAll() }
                        _ = try await sleeps.next()
                    }
                })
            })
    }

    private func loop<Next: Sendable>(
        _ name: String, logger: Logger, _ iteration: @escaping @Sendable () async throws -> Next?,
        retryingAfter: @escaping @Sendable (Duration) -> Next, waiting: @escaping @Sendable (Next?) async throws -> Void
    ) async {
        do {
            try await cancelWhenGracefulShutdown {
                var pause = Duration.seconds(1)
                while !Task.isCancelled {
                    let next: Next?
                    do {
                        next = try await iteration()
                        pause = .seconds(1)
                    } catch is CancellationError {
                        return
                    } catch {
                        logger.error(
                            "Service failed a pass; trying again",
                            metadata: ["service": "\(name)", "error": "\(error)", "retry.in": "\(pause)"])
                        next = retryingAfter(pause)
                        pause = min(pause * 2, .seconds(60))
                    }
                    try await waiting(next)
                }
            }
        } catch {}
    }
}
