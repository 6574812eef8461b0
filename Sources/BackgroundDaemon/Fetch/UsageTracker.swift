import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation

/// The live usage learner and the day's wake threshold, kept in memory and fed as opens arrive.
///
/// Derived state: the store's recorded opens are the truth, and the learner is rebuilt from them
/// when bgd starts (and when an app's habits are reset), so a crash loses nothing but the
/// threshold's adjustment, which starts again from its initial value.
public actor UsageTracker {
    public struct Configuration: Sendable {
        public var learning: UsageLearner.Configuration
        public var planner: AdaptiveWakePlanner.Configuration
        public var initialThreshold: Double
        /// How much stored history a rebuild reads.
        public var memory: Duration

        public init(
            learning: UsageLearner.Configuration = .init(), planner: AdaptiveWakePlanner.Configuration = .init(),
            initialThreshold: Double = 0.3, memory: Duration = .seconds(8 * 7 * 86400)
        ) {
            self.learning = learning
            self.planner = planner
            self.initialThreshold = initialThreshold
            self.memory = memory
        }
    }

    private let store: BackgroundStore
    private let configuration: Configuration
    private var learner: UsageLearner
    private var threshold: WakeThreshold

    public init(store: BackgroundStore, configuration: Configuration) {
        self.store = store
        self.configuration = configuration
        learner = UsageLearner(configuration: configuration.learning)
        threshold = WakeThreshold(initial: configuration.initialThreshold)
    }

    /// Relearns everything from the stored opens.
    public func rebuild(now: Date) async throws {
        let opens = try await store.allOpens(since: now.addingTimeInterval(-configuration.memory.seconds))
        var fresh = UsageLearner(configuration: configuration.learning)
        for open in opens { fresh.recordOpen(of: open.app.rawValue, at: open.at) }
        learner = fresh
    }

    public func recordOpen(of app: AppID, at date: Date) { learner.recordOpen(of: app.rawValue, at: date) }

    /// Forgets one app (its habits were reset or it was unregistered).
    public func forget(_ app: AppID) { learner.forget(app: app.rawValue) }

    /// A wake the outlook planned was started: it counts against the day's budget.
    public func recordWake() { threshold.recordWake() }

    /// The outlook at `now`, for the fetch policy.
    public func outlook(now: Date) -> UsageOutlook {
        learner.advance(to: now)
        let planner = AdaptiveWakePlanner(configuration: configuration.planner)
        threshold.update(now: now, budgetPerDay: planner.dailyBudget(learner: learner, now: now))
        return UsageOutlook(learner: learner, planner: planner, threshold: threshold.value)
    }
}
