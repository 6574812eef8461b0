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
    /// One wake to start now: which app, what it carries out, and whether it spends the usage
    /// budget (a wake placed by a predicted open does; the adaptive threshold learns from it).
    public struct Start: Hashable, Sendable {
        public enum Work: Hashable, Sendable {
            /// `performFetchWithCompletionHandler`.
            case fetch
            /// The app's pending `BGAppRefreshTaskRequest`, whose begin date has come, takes the wake.
            case refreshTask(identifier: String)
        }
        public var app: AppID
        public var work: Work
        public var servesPredictedOpen: Bool

        public init(app: AppID, work: Work, servesPredictedOpen: Bool) {
            self.app = app
            self.work = work
            self.servesPredictedOpen = servesPredictedOpen
        }
    }

    /// The wakes to start now, most overdue first.
    public var starts: [Start]
    /// The apps to wake now, most overdue first.
    public var launch: [AppID] { starts.map(\.app) }
    /// One decision per candidate, in candidate order.
    public var decisions: [WakeDecision]
    /// When to plan again if nothing else happens first (nil: only when something changes).
    public var nextEvaluation: Date?

    public init(starts: [Start], decisions: [WakeDecision], nextEvaluation: Date?) {
        self.starts = starts
        self.decisions = decisions
        self.nextEvaluation = nextEvaluation
    }

    public func decision(for app: AppID) -> WakeDecision? { decisions.first { $0.app == app } }
}
