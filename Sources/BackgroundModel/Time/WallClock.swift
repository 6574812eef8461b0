import Foundation

/// The single source of wall-clock time for everything that is not pure policy.
///
/// Deadlines are persisted as UTC dates, so they survive restarts; `Swift.Clock` instants are
/// process-local. The system clock is used in production, `BackgroundTesting.ManualClock` in tests.
public protocol WallClock: Sendable {
    var now: Date { get }
    /// Time that has really passed since an arbitrary origin, on a clock no one sets: it does
    /// not jump when the wall clock does (reliability-matrix D14: a no-progress timeout must
    /// not fire because the date moved two days).
    var elapsed: Duration { get }
    /// Time the machine has been running since an arbitrary origin: as `elapsed`, but standing
    /// still while the machine is suspended (`SuspendingClock`). What a run's budget counts —
    /// an app frozen with the machine has not had its time.
    var awake: Duration { get }
    /// Returns at or after `deadline`; throws `CancellationError` when the task is cancelled.
    func sleep(until deadline: Date) async throws
    /// Returns once `duration` has really passed (`elapsed`), however the wall clock is set
    /// meanwhile: for timeouts and liveness checks, which a clock set back an hour must not
    /// stretch by an hour. Throws `CancellationError` when the task is cancelled.
    func sleep(for duration: Duration) async throws
    /// Returns once `elapsed` has reached `end` — `sleep(for:)` from an instant read earlier, so
    /// that time passing between that reading and the sleep is not waited for twice. Throws
    /// `CancellationError` when the task is cancelled.
    func sleep(untilElapsed end: Duration) async throws
}

extension WallClock {
    public func sleep(for duration: Duration) async throws { try await sleep(untilElapsed: elapsed + duration) }
}

/// The real wall clock.
public struct SystemClock: WallClock {
    /// Bounds how late a sleeper wakes if the wall clock jumps while it naps.
    public var maximumNap: Duration
    /// How one nap is slept: `Task.sleep` by default (bgd sleeps on event-loop timers instead).
    public var nap: @Sendable (Duration) async throws -> Void
    /// Sleeps until a wall-clock deadline in one go, where the platform can (bgd's alarm on
    /// Linux): no naps then.
    public var sleepUntil: (@Sendable (Date) async throws -> Void)?

    public init(
        maximumNap: Duration = .seconds(60),
        nap: @escaping @Sendable (Duration) async throws -> Void = { try await Task.sleep(for: $0) }
    ) {
        self.maximumNap = maximumNap
        self.nap = nap
    }

    public var now: Date { Date() }

    private static let origin = ContinuousClock.now
    public var elapsed: Duration { Self.origin.duration(to: .now) }

    private static let awakeOrigin = SuspendingClock.now
    public var awake: Duration { Self.awakeOrigin.duration(to: .now) }

    public func sleep(until deadline: Date) async throws {
        if let sleepUntil {
            try await sleepUntil(deadline)
            return try Task.checkCancellation()
        }
        while case let remaining = deadline.timeIntervalSince(now), remaining > 0 {
            try await nap(min(.milliseconds(Int64((remaining * 1000).rounded(.up))), maximumNap))
        }
        try Task.checkCancellation()
    }

    /// Naps on the monotonic clock (`Task.sleep`, or bgd's event-loop timers), which no one sets.
    public func sleep(untilElapsed end: Duration) async throws {
        while case let remaining = end - elapsed, remaining > .zero { try await nap(remaining) }
        try Task.checkCancellation()
    }
}
