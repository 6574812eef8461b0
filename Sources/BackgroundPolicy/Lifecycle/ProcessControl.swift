import BackgroundModel
import Foundation

/// What bgd does with one app process, over its life: the pure half of `ProcessSupervisor`.
///
/// Every way an app process ends — a run's budget ran out, an answered run's linger is over, its
/// background time ended, bgd stops — comes down to the same timeline: asked to exit, SIGTERM,
/// a grace, SIGKILL. Suspension is a freeze and its undoing a thaw; a process being ended is
/// never frozen again. The supervisor carries the actions out (through the app's cgroup or by
/// signals) and asks `tick` again at `nextDeadline`.
///
/// Its times are on the clock's `elapsed` (time that really passes since bgd started), not the
/// wall clock: a wall clock set forward would SIGKILL with no grace, and one set back would
/// leave a process that ignores SIGTERM running for as long as the step.
public struct ProcessControl: Sendable, Equatable {
    public enum Phase: Sendable, Equatable {
        case running
        case frozen
        /// Told to exit; SIGTERM at `terminateAt` unless it exits first, SIGKILL `killGrace` later.
        case exitRequested(terminateAt: Duration, killGrace: Duration)
        /// Sent SIGTERM; SIGKILL at `killAt`.
        case terminating(killAt: Duration)
        case killed
        case exited
    }

    public enum Action: Sendable, Equatable {
        case none
        case freeze
        case thaw
        /// SIGTERM to every process of the app (thawed first: a frozen process cannot act on it).
        case terminate
        /// SIGKILL to every process of the app.
        case kill
    }

    public private(set) var phase: Phase

    public init(phase: Phase = .running) { self.phase = phase }

    /// Whether the process is on its way out (or gone): nothing may freeze or reuse it.
    public var isEnding: Bool {
        switch phase {
        case .running, .frozen: false
        case .exitRequested, .terminating, .killed, .exited: true
        }
    }

    /// Whether `spare` would keep it: alive, and no SIGTERM sent yet.
    public var canBeSpared: Bool {
        switch phase {
        case .running, .frozen, .exitRequested: true
        case .terminating, .killed, .exited: false
        }
    }

    /// When `tick` has something to do next, if ever.
    public var nextDeadline: Duration? {
        switch phase {
        case .exitRequested(let terminateAt, _): terminateAt
        case .terminating(let killAt): killAt
        case .running, .frozen, .killed, .exited: nil
        }
    }

    /// Suspend: only a running process that nobody is ending.
    public mutating func freeze() -> Action {
        guard phase == .running else { return .none }
        phase = .frozen
        return .freeze
    }

    /// Continue a frozen process.
    public mutating func thaw() -> Action {
        guard phase == .frozen else { return .none }
        phase = .running
        return .thaw
    }

    /// Ends the process `after` from now (it was told to exit and may do so itself), with
    /// SIGKILL `grace` after the SIGTERM. An earlier end already planned stands.
    public mutating func end(after: Duration, grace: Duration, now: Duration) -> Action {
        switch phase {
        case .killed, .exited, .terminating:
            return .none
        case .exitRequested(let terminateAt, let killGrace):
            phase = .exitRequested(terminateAt: min(terminateAt, now + after), killGrace: min(killGrace, grace))
            return tick(now: now)
        case .running, .frozen:
            let wasFrozen = phase == .frozen
            phase = .exitRequested(terminateAt: now + after, killGrace: grace)
            let action = tick(now: now)
            // A frozen process cannot exit by itself: it is thawed to hear it should.
            return action == .none && wasFrozen ? .thaw : action
        }
    }

    /// A planned end is off: the process has work again (a run took over a process launched for
    /// events only). Once SIGTERM is sent it cannot be taken back.
    public mutating func spare() -> Action {
        guard case .exitRequested = phase else { return .none }
        phase = .running
        return .none
    }

    /// SIGTERM now, SIGKILL at `killAt` (at once when that has passed). An earlier kill stands.
    public mutating func terminate(killAt: Duration, now: Duration) -> Action {
        switch phase {
        case .killed, .exited:
            return .none
        case .terminating(let planned):
            phase = .terminating(killAt: min(planned, killAt))
            return tick(now: now)
        case .running, .frozen, .exitRequested:
            if killAt <= now {
                phase = .killed
                return .kill
            }
            phase = .terminating(killAt: killAt)
            return .terminate
        }
    }

    /// SIGKILL now.
    public mutating func kill() -> Action {
        switch phase {
        case .killed, .exited: return .none
        default:
            phase = .killed
            return .kill
        }
    }

    /// The process is gone (reaped, or its pidfd said so). Nothing more to do, ever.
    public mutating func exited() { phase = .exited }

    /// What time demands now.
    public mutating func tick(now: Duration) -> Action {
        switch phase {
        case .exitRequested(let terminateAt, let killGrace) where terminateAt <= now:
            phase = .terminating(killAt: now + killGrace)
            return .terminate
        case .terminating(let killAt) where killAt <= now:
            phase = .killed
            return .kill
        default:
            return .none
        }
    }
}
