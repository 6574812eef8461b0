import BackgroundModel
import Foundation

/// The policy's answer for one app: when it should next be woken, and every reason why.
public struct WakeDecision: Hashable, Sendable {
    public var app: AppID
    /// Nil: no wake is planned (fetch disabled, or a run is in flight).
    public var dueAt: Date?
    public var reasons: [DecisionReason]
    /// The gap this wake keeps from the app's last one (its interval, stretched by backoff, or
    /// the rare wakes of an unused app); nil for a wake placed by a predicted open or made up at
    /// once. Conditions that thin wakes out add it again.
    public var spacing: Duration?

    public init(app: AppID, dueAt: Date?, reasons: [DecisionReason], spacing: Duration? = nil) {
        self.app = app
        self.dueAt = dueAt
        self.reasons = reasons
        self.spacing = spacing
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
