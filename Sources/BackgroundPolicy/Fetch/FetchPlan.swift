import BackgroundModel
import Foundation

/// The policy's answer for one app: when it should next be woken, and every reason why.
public struct WakeDecision: Hashable, Sendable {
    public var app: AppID
    /// Nil: no wake is planned (fetch disabled, or a run is in flight).
    public var dueAt: Date?
    public var reasons: [DecisionReason]

    public init(app: AppID, dueAt: Date?, reasons: [DecisionReason]) {
        self.app = app
        self.dueAt = dueAt
        self.reasons = reasons
    }
}

/// The policy's answer for all apps at one instant.
public struct FetchPlan: Hashable, Sendable {
    /// Apps to wake now, most overdue first.
    public var launch: [AppID]
    /// One decision per candidate, in candidate order.
    public var decisions: [WakeDecision]
    /// When to plan again if nothing else happens first (nil: only when something changes).
    public var nextEvaluation: Date?

    public init(launch: [AppID], decisions: [WakeDecision], nextEvaluation: Date?) {
        self.launch = launch
        self.decisions = decisions
        self.nextEvaluation = nextEvaluation
    }

    public func decision(for app: AppID) -> WakeDecision? { decisions.first { $0.app == app } }
}
