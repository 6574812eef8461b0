import Foundation

/// One user's learned usage, as the daemon keeps it and the replay runs it: the open history,
/// the per-user `OpenPredictor` and the `WakeBudget` that turns its estimates into wakes.
///
/// It learns without waking anybody. Between two opens nothing the model reads changes, so the
/// moments it learns from — every `step` on the clock and one second after each open — are
/// filled in when the next open arrives: each app not opened within `freshFor` gets an example
/// (its features then, labelled once its horizon has passed) and a candidate for the budget's
/// threshold (its estimate then). A daemon that sleeps for hours thus learns exactly what one
/// that looked every ten minutes would have, and the replay that scores the planner goes through
/// the same path.
public struct LearnedUsage: Sendable {
    public struct Configuration: Sendable {
        public var history: OpenHistory.Configuration
        public var predictor: OpenPredictor.Configuration
        /// Wakes a day per open a day.
        public var wakesPerOpen: Double
        /// The clock's grid of moments learned from and planned on.
        public var step: Double
        /// An app opened or woken this recently is fresh.
        public var freshFor: Double
        /// No second wake of an app within this unless it was opened meanwhile.
        public var noRewake: Double
        public var initialThreshold: Double
        /// After this long without any open the user is away: no more moments are learned from.
        public var dormancy: Double
        public var check: EstimateCheck.Configuration
        /// Opens older than this are forgotten, once a day (`OpenHistory.forget`): bgd sets it
        /// to what a rebuild reads, so the model it runs is the one a restart would rebuild.
        public var memory: Double = 8 * 7 * 86400

        public init(
            history: OpenHistory.Configuration = .init(), predictor: OpenPredictor.Configuration = .init(),
            wakesPerOpen: Double = 1, step: Duration = .seconds(600), freshFor: Duration = .seconds(3600),
            noRewake: Duration = .seconds(3600), initialThreshold: Double = 0.3,
            dormancy: Duration = .seconds(7 * 86400), check: EstimateCheck.Configuration = .init()
        ) {
            self.history = history
            self.predictor = predictor
            self.wakesPerOpen = wakesPerOpen
            self.step = max(60, step.seconds)
            self.freshFor = freshFor.seconds
            self.noRewake = noRewake.seconds
            self.initialThreshold = initialThreshold
            self.dormancy = dormancy.seconds
            self.check = check
        }
    }

    /// Why an app gets no wake in the window looked at.
    public enum Holdback: Error, Sendable {
        case neverOpened
        /// Fresh until then (its last open or wake).
        case stillFresh(until: Double)
        /// The best moment in the window and its estimate, under the threshold.
        case belowThreshold(at: Double, OpenPredictor.Estimate, threshold: Double)
        /// The budget has nothing left until more opens earn it.
        case budgetSpent(balance: Double)
    }

    /// A planned wake and the estimate behind it.
    public struct PlannedWake: Sendable {
        public var at: Double
        public var estimate: OpenPredictor.Estimate
        public var threshold: Double
    }

    public let configuration: Configuration
    public private(set) var history: OpenHistory
    public private(set) var predictor: OpenPredictor
    /// How the predictor's estimates came true, by time of day, over the last week.
    public private(set) var check: EstimateCheck
    /// The budget at `configuration.wakesPerOpen` and any others kept beside it (a replay of
    /// several budgets in one walk: the model and the history do not depend on the budget).
    public private(set) var budgets: [WakeBudget]
    /// The budget the daemon plans with.
    public var budget: WakeBudget { budgets[0] }
    /// When opens older than `memory` were last forgotten.
    private var forgottenAt = -Double.infinity

    /// A moment the model learned from: an app not fresh by an open, its features then and the
    /// estimate the budget's threshold saw (`bgctl simulate trace --moments-out`, for studying
    /// the model outside it).
    public struct ScoredMoment: Sendable {
        public var at: Double
        public var app: String
        public var estimate: Double
        public var features: [Double]
    }

    /// Whether `scoredMoments` keeps every moment learned from: off in bgd, whose months of
    /// moments nobody reads.
    public var keepsScoredMoments = false
    public private(set) var scoredMoments: [ScoredMoment] = []

    public init(configuration: Configuration = .init()) { self.init(configuration: configuration, alsoAt: []) }

    /// With a budget at each of `otherWakesPerOpen` too, each fed the same candidates.
    public init(configuration: Configuration, alsoAt otherWakesPerOpen: [Double]) {
        self.configuration = configuration
        history = OpenHistory(configuration: configuration.history)
        predictor = OpenPredictor(configuration: configuration.predictor)
        check = EstimateCheck(configuration: configuration.check)
        budgets = ([configuration.wakesPerOpen] + otherWakesPerOpen).map {
            WakeBudget(
                wakesPerOpen: $0, initialThreshold: configuration.initialThreshold,
                rewake: .seconds(configuration.noRewake))
        }
    }

    /// Whether the model has been fitted to a day of the user's opens (its first daily refit);
    /// before that its estimates are its starting guess, and bgd does not plan with them.
    public var hasLearned: Bool { predictor.refits > 0 }

    /// Records an open at `t` (opens arrive in time order; an earlier one is ignored).
    /// The latest open learned from (opens before it are not taken: the model learns in time order).
    public var latestOpen: Double? { history.allOpens.last }

    public mutating func recordOpen(of app: String, at t: Double) {
        if let last = history.allOpens.last {
            guard t >= last else { return }
            if t > last { learnMoments(after: last, before: t) }
        }
        history.recordOpen(of: app, at: t)
        if t - forgottenAt >= 86400 {
            history.forget(before: t - configuration.memory)
            predictor.forgetMoments(before: t - configuration.memory)
            forgottenAt = t
        }
        for index in budgets.indices { budgets[index].recordOpen(at: t) }
        predictor.learn(upTo: t, history: history)
        check.check(upTo: t, horizon: configuration.freshFor, history: history)
    }

    /// The model rebuilt from stored opens (in time order), as bgd rebuilds it at start: every
    /// open replayed, the model's refits skipped but for the last eight days — the budget's
    /// threshold reads only the last week's scores, and the exact refit does not depend on the
    /// weights before it (`OpenPredictor.deferRefits`), so the result is the one a bgd running
    /// all along would hold, three times faster.
    public static func rebuilt(
        configuration: Configuration, opens: some Sequence<(app: String, at: Double)>, now: Double
    ) -> LearnedUsage {
        var usage = LearnedUsage(configuration: configuration)
        usage.predictor.deferRefits(until: now - WakeBudget.pace - 86400)
        for open in opens { usage.recordOpen(of: open.app, at: open.at) }
        return usage
    }

    /// A wake the plan made was started (spent from budget `index`).
    public mutating func recordWake(at t: Double, budget index: Int = 0) { budgets[index].spend(at: t) }

    /// Refits the budgets' thresholds if an hour has passed (cheap otherwise).
    public mutating func adjust(at t: Double) {
        for index in budgets.indices { budgets[index].adjust(at: t) }
    }

    /// The chance that `app` is opened within the horizon after `t`, with why; nil for an app
    /// never opened.
    public func estimate(of app: String, at t: Double) -> OpenPredictor.Estimate? {
        guard history.opens[app] != nil else { return nil }
        let raw = predictor.estimate(
            OpenPredictor.features(of: app, at: t, in: history, horizon: configuration.freshFor))
        return checked(raw, at: t)
    }

    /// `raw` scaled by how the estimates of its time of day have been coming true.
    private func checked(_ raw: OpenPredictor.Estimate, at t: Double) -> OpenPredictor.Estimate {
        var estimate = raw
        (estimate.probability, estimate.timeOfDayFactor) = check.scaled(
            raw.probability, quarter: EstimateCheck.quarter(of: t, in: history))
        return estimate
    }

    /// Whether a wake of `app` at `t` would go now: not fresh, not woken again too soon, its
    /// estimate at or above the threshold and the budget not spent.
    public func wake(
        _ app: String, at t: Double, lastWake: Double?
    ) -> Result<PlannedWake, Holdback> {
        if let stale = staleness(of: app, at: t, lastWake: lastWake) { return .failure(stale) }
        guard let estimate = estimate(of: app, at: t) else { return .failure(.neverOpened) }
        return wake(at: t, estimate: estimate, budget: budget)
    }

    /// Why `app` may not be woken at `t` whatever its estimate (never opened, or still fresh),
    /// or nil if it may.
    public func staleness(of app: String, at t: Double, lastWake: Double?) -> Holdback? {
        guard let lastOpen = history.opens[app]?.last else { return .neverOpened }
        let refreshed = max(lastOpen, lastWake ?? -.infinity)
        if t - lastOpen < configuration.freshFor {
            return .stillFresh(until: lastOpen + configuration.freshFor)
        }
        if let lastWake, lastWake > lastOpen, t - lastWake < configuration.noRewake {
            return .stillFresh(until: max(refreshed + configuration.freshFor, lastWake + configuration.noRewake))
        }
        return nil
    }

    /// Whether a stale app with `estimate` at `t` clears `budget`'s threshold and fits in it.
    public func wake(
        at t: Double, estimate: OpenPredictor.Estimate, budget: WakeBudget
    ) -> Result<PlannedWake, Holdback> {
        guard estimate.probability >= budget.threshold else {
            return .failure(.belowThreshold(at: t, estimate, threshold: budget.threshold))
        }
        guard budget.allows(estimate.probability, at: t) else { return .failure(.budgetSpent(balance: budget.balance)) }
        return .success(PlannedWake(at: t, estimate: estimate, threshold: budget.threshold))
    }

    /// The first moment on the grid from `notBefore` to `end` at which `app` would be woken if
    /// nothing new happens, or why none: features move only with the clock until the next
    /// open, so the daemon can sleep until that moment.
    public func nextWake(
        _ app: String, lastWake: Double?, notBefore: Double, until end: Double
    ) -> Result<PlannedWake, Holdback> {
        var t = notBefore
        var best: Holdback?
        while t <= end {
            switch wake(app, at: t, lastWake: lastWake) {
            case .success(let planned): return .success(planned)
            case .failure(.neverOpened): return .failure(.neverOpened)
            case .failure(.budgetSpent(let balance)): return .failure(.budgetSpent(balance: balance))
            case .failure(.stillFresh(let until)):
                best = best ?? .stillFresh(until: until)
                // Skip to the first grid point at which the content is stale.
                let stale = (until / configuration.step).rounded(.up) * configuration.step
                if stale > t {
                    t = stale
                    continue
                }
            case .failure(.belowThreshold(let at, let estimate, let threshold)):
                if case .belowThreshold(_, let previous, _) = best, previous.probability >= estimate.probability {
                } else {
                    best = .belowThreshold(at: at, estimate, threshold: threshold)
                }
            }
            t = t.nextGridPoint(configuration.step)
        }
        return .failure(best ?? .neverOpened)
    }

    /// The moments the daemon would have looked at in (`last`, `t`): one second after the open at
    /// `last`, then every `step` on the clock; each app then not fresh by an open is an example
    /// for the model and a candidate for the threshold.
    private mutating func learnMoments(after last: Double, before t: Double) {
        let end = min(t, last + configuration.dormancy)
        var moment = last + 1
        while moment < end {
            for app in history.appsByName {
                // In name order: the model learns in the same order in every run, so figures
                // are reproducible (a dictionary's order changes from process to process).
                guard let lastOpen = history.opens[app]?.last, moment - lastOpen >= configuration.freshFor else {
                    continue
                }
                let x = OpenPredictor.features(of: app, at: moment, in: history, horizon: configuration.freshFor)
                predictor.observe(app, at: moment, features: x)
                let raw = predictor.estimate(x).probability
                let quarter = EstimateCheck.quarter(of: moment, in: history)
                check.record(app, at: moment, quarter: quarter, estimate: raw)
                let score = check.scaled(raw, quarter: quarter).probability
                if keepsScoredMoments {
                    scoredMoments.append(ScoredMoment(at: moment, app: app, estimate: score, features: x))
                }
                for index in budgets.indices {
                    budgets[index].consider(app, score: score, at: moment, lastOpen: lastOpen)
                }
            }
            moment = moment.nextGridPoint(configuration.step)
        }
    }
}

extension Double {
    /// The first multiple of `step` after this time.
    func nextGridPoint(_ step: Double) -> Double { ((self / step).rounded(.down) + 1) * step }
}
