import BackgroundModel
import Foundation

/// What the fetch policy knows about one app: a snapshot of the store.
public struct FetchCandidate: Hashable, Sendable {
    public var app: AppID
    public var interval: FetchInterval
    public var registeredAt: Date
    /// Most recent first; only finished runs.
    public var recentRuns: [FinishedRun]
    /// Whether a run is in flight now.
    public var isRunning: Bool
    /// The app's `.newData`/`.noData` answers of the last weeks, for `FetchYield`.
    public var answers: [Answer]
    /// A pending app refresh task request's earliest begin date: no wake before it.
    public var notBefore: Date?
    /// The identifier of the app's pending app refresh task request: a due wake carries it out.
    public var pendingRefreshTask: String?

    public init(
        app: AppID, interval: FetchInterval, registeredAt: Date, recentRuns: [FinishedRun] = [],
        isRunning: Bool = false,
        answers: [Answer] = []
    ) {
        self.answers = answers
        self.app = app
        self.interval = interval
        self.registeredAt = registeredAt
        self.recentRuns = recentRuns
        self.isRunning = isRunning
    }

    /// A past run: when it started and how it ended.
    public struct FinishedRun: Hashable, Sendable {
        public var id: RunID?
        public var startedAt: Date
        public var outcome: RunOutcome
        /// Asked for by the operator (`bgctl simulate fetch`, `tasks run`): a debugging aid that
        /// spends none of the app's wakes, though its trouble counts like any run's.
        public var manual: Bool

        public init(id: RunID? = nil, startedAt: Date, outcome: RunOutcome, manual: Bool = false) {
            self.id = id
            self.startedAt = startedAt
            self.outcome = outcome
            self.manual = manual
        }
    }

    /// A fetch the app answered: when it started and whether it found something new.
    public struct Answer: Hashable, Sendable {
        public var at: Date
        public var broughtNewData: Bool

        public init(at: Date, broughtNewData: Bool) {
            self.at = at
            self.broughtNewData = broughtNewData
        }
    }
}
