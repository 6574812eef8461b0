import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation

/// The live usage learners and the wake thresholds, kept in memory and fed as opens arrive.
///
/// Two planners are kept: the per-user learned model (`LearnedUsage`, the default, the one the
/// frontier measures best) and the adaptive hour-of-day planner it replaced (`--fetch-planner
/// adaptive`). Derived state: the store's recorded opens are the truth, and both are rebuilt
/// from them when bgd starts and when an app's habits are reset or it is unregistered, so a
/// crash loses nothing but the thresholds' adjustment. The learned model learns as opens arrive
/// (it fills in the moments between opens then), so it needs no timer of its own.
public actor UsageTracker {
    /// Which planner turns usage into wakes.
    public enum Planner: String, CaseIterable, Sendable {
        case learned, adaptive
    }

    public struct Configuration: Sendable {
        /// Which planner plans (`--fetch-planner`).
        public var planning: Planner
        /// The learned planner's model and budget.
        public var learned: LearnedUsage.Configuration
        public var learning: UsageLearner.Configuration
        public var planner: AdaptiveWakePlanner.Configuration
        public var initialThreshold: Double
        /// How much stored history a rebuild reads.
        public var memory: Duration

        public init(
            planning: Planner = .learned, learned: LearnedUsage.Configuration = .init(),
            learning: UsageLearner.Configuration = .init(), planner: AdaptiveWakePlanner.Configuration = .init(),
            initialThreshold: Double = 0.3, memory: Duration = .seconds(8 * 7 * 86400)
        ) {
            self.planning = planning
            self.learned = learned
            // The model keeps what a rebuild reads, no more.
            self.learned.memory = memory.seconds
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
    private var learned: LearnedUsage

    /// An open stamped this much (seconds) before the latest learned from says the clock was set back.
    static let clockSetBack: Double = 60

    public init(store: BackgroundStore, configuration: Configuration) {
        self.store = store
        self.configuration = configuration
        learner = UsageLearner(configuration: configuration.learning)
        threshold = WakeThreshold(initial: configuration.initialThreshold)
        learned = LearnedUsage(configuration: configuration.learned)
    }

    /// Relearns everything from the stored opens (the learned model replays them: about two
    /// seconds for 90 days of a heavy user's opens).
    /// Opens stamped after `now` (the clock was ahead, and set back since) are left out: they wait
    /// in the store for the clock to reach them.
    public func rebuild(now: Date) async throws {
        let opens = try await store.allOpens(since: now.addingTimeInterval(-configuration.memory.seconds), until: now)
        var fresh = UsageLearner(configuration: configuration.learning)
        for open in opens { fresh.recordOpen(of: open.app.rawValue, at: open.at) }  // in time order
        learner = fresh
        learned = LearnedUsage.rebuilt(
            configuration: configuration.learned,
            opens: opens.lazy.map { (app: $0.app.rawValue, at: $0.at.timeIntervalSince1970) },
            now: now.timeIntervalSince1970)
    }

    /// An open as it happens. One more than a minute before the latest learned from means the
    /// clock was set back (it was ahead when that one was stamped): the model, which learns in
    /// time order, is rebuilt from the opens up to now. Before, it dropped every open until the
    /// clock caught up with the one stamped ahead — days, for a clock a few days fast — and a
    /// restart kept it so. (Two opens arriving a moment out of order are not worth a rebuild:
    /// the earlier is dropped, as before.)
    public func recordOpen(of app: AppID, at date: Date) async {
        if let latest = learned.latestOpen, date.timeIntervalSince1970 < latest - Self.clockSetBack,
            (try? await rebuild(now: date)) != nil
        {
            return  // the rebuild read this open from the store
        }
        learner.recordOpen(of: app.rawValue, at: date)
        learned.recordOpen(of: app.rawValue, at: date.timeIntervalSince1970)
    }

    /// Forgets one app (its habits were reset or it was unregistered): the adaptive learner drops
    /// it, the learned model is rebuilt from the opens the store still holds.
    public func forget(_ app: AppID, now: Date) async {
        learner.forget(app: app.rawValue)
        try? await rebuild(now: now)
    }

    /// A wake the outlook planned was started: it counts against the day's budget.
    public func recordWake(at date: Date) {
        threshold.recordWake()
        learned.recordWake(at: date.timeIntervalSince1970)
    }

    /// The learned model's chance that `app` is opened soon, and why (`bgctl usage`); nil for an
    /// app never opened or with the adaptive planner.
    public func openChance(of app: AppID, now: Date) -> UsageSummary.OpenChance? {
        guard configuration.planning == .learned,
            let estimate = learned.estimate(of: app.rawValue, at: now.timeIntervalSince1970)
        else { return nil }
        return UsageSummary.OpenChance(
            probability: estimate.probability, within: .seconds(configuration.learned.freshFor),
            threshold: learned.budget.threshold,
            factors: estimate.strongest(5).filter { abs($0.1) >= 0.005 }.map { .init(feature: $0.0.label, pull: $0.1) },
            timeOfDayFactor: estimate.timeOfDayFactor)
    }

    /// The outlook at `now`, for the fetch policy.
    public func outlook(now: Date) -> UsageOutlook {
        learner.advance(to: now)
        learned.adjust(at: now.timeIntervalSince1970)
        let planner = AdaptiveWakePlanner(configuration: configuration.planner)
        threshold.update(now: now, budgetPerDay: planner.dailyBudget(learner: learner, now: now))
        return UsageOutlook(
            learner: learner, planner: planner, threshold: threshold.value,
            learned: configuration.planning == .learned ? learned : nil)
    }
}
