import BackgroundModel
import Foundation

/// The timeline of one run's budget, from its start: warn, terminate, kill.
///
/// The app is told to expire `expirationLead` before the deadline (its handler is cancelled and
/// its expiration handler runs), gets SIGTERM at the deadline, and SIGKILL `killGrace` after it.
public struct RunBudget: Hashable, Sendable {
    public var budget: Duration
    public var expirationLead: Duration
    public var killGrace: Duration

    public init(
        budget: Duration = .seconds(30), expirationLead: Duration = .seconds(5), killGrace: Duration = .seconds(5)
    ) {
        self.budget = budget
        self.expirationLead = min(expirationLead, budget)
        self.killGrace = killGrace
    }

    public func deadline(startingAt start: Date) -> Date { start.adding(budget) }
    public func expirationWarning(startingAt start: Date) -> Date { start.adding(budget - expirationLead) }
    public func killTime(startingAt start: Date) -> Date { start.adding(budget + killGrace) }

    /// What to do to a run still in flight at `now`.
    public func step(startedAt start: Date, warned: Bool, now: Date) -> Step {
        if now >= killTime(startingAt: start) { return .kill }
        if now >= deadline(startingAt: start) { return .terminate(killAt: killTime(startingAt: start)) }
        if now >= expirationWarning(startingAt: start) {
            return warned ? .wait(until: deadline(startingAt: start)) : .warn(nextAt: deadline(startingAt: start))
        }
        return .wait(until: expirationWarning(startingAt: start))
    }

    public enum Step: Hashable, Sendable {
        case wait(until: Date)
        case warn(nextAt: Date)
        case terminate(killAt: Date)
        case kill
    }
}
