import BackgroundModel
import Foundation

/// Plans an app's background wakes from what the `UsageLearner` expects: a wake is worth making
/// when the session starts expected in the freshness window after it reach the day's
/// `WakeThreshold`, and the app has wakes left in its daily budget.
///
/// The budget follows the app's own opens a day (`wakesPerOpen` of them), so an app opened five
/// times a day gets about five wakes and an app never opened gets none — Android's standby buckets,
/// derived instead of fixed. Pure: the caller passes the learner, the last refresh and `now`; the
/// replay and the daemon ask the same questions of it.
public struct AdaptiveWakePlanner: Hashable, Sendable {
    public struct Configuration: Hashable, Sendable {
        /// How long fetched content counts as fresh; a wake is not planned while the last one holds.
        public var freshness: Duration
        /// Wakes a day per expected open a day: 1 spends what an oracle would, one wake per open.
        public var wakesPerOpen: Double
        /// No single app gets more than this many times its share of the budget in a day.
        public var appShareCap: Double
        /// How far ahead `nextWake` and `forecast` look.
        public var horizon: Duration
        /// The grid on which future wakes are considered.
        public var step: Duration

        public init(
            freshness: Duration = .seconds(3600), wakesPerOpen: Double = 0.9, appShareCap: Double = 2,
            horizon: Duration = .seconds(86400), step: Duration = .seconds(600)
        ) {
            self.freshness = freshness
            self.wakesPerOpen = wakesPerOpen
            self.appShareCap = appShareCap
            self.horizon = horizon
            self.step = max(.seconds(60), step)
        }
    }

    /// One planned wake and the evidence for it.
    public struct PlannedWake: Hashable, Sendable {
        public var at: Date
        public var prediction: UsageLearner.Prediction
        public var threshold: Double
    }

    /// Why no wake is planned now.
    public enum Holdback: Error, Hashable, Sendable {
        /// The app has never been opened: nothing to predict from.
        case neverOpened
        /// The last refresh is still fresh until this time.
        case stillFresh(until: Date)
        /// The app has spent its wakes for the last 24 hours.
        case budgetSpent(spent: Int, cap: Int)
        /// The expected value is below the threshold.
        case belowThreshold(UsageLearner.Prediction, threshold: Double)
        /// Worth a wake, but one a step later serves as much with fresher content: the likely
        /// open is not in the next step yet.
        case closerToTheOpen(UsageLearner.Prediction, threshold: Double)
    }

    public var configuration: Configuration

    public init(configuration: Configuration = .init()) { self.configuration = configuration }

    /// Wakes a day all the user's apps earn together: `wakesPerOpen` per open a day.
    public func dailyBudget(learner: UsageLearner, now: Date) -> Double {
        learner.device.opensPerDay(now: now) * configuration.wakesPerOpen
    }

    /// Wakes a day the app's use earns: its share of the user's opens, of the whole budget.
    public func dailyBudget(for app: String, learner: UsageLearner, now: Date) -> Double {
        learner.share(of: app, now: now) * dailyBudget(learner: learner, now: now)
    }

    /// The most wakes one app may take in 24 hours.
    public func dailyCap(for app: String, learner: UsageLearner, now: Date) -> Int {
        let budget = dailyBudget(for: app, learner: learner, now: now)
        return budget > 0 ? Int((budget * configuration.appShareCap).rounded(.up)) : 0
    }

    /// Whether to wake `app` at `date`: the wake, or why not.
    ///
    /// - Parameters:
    ///   - lastRefresh: the app's last wake or open.
    ///   - wakesInLastDay: wakes the app had in the 24 hours before `date`.
    public func evaluate(
        _ app: String, at date: Date, learner: UsageLearner, threshold: Double, lastRefresh: Date?, wakesInLastDay: Int,
        now: Date
    ) -> Result<PlannedWake, Holdback> {
        guard let prediction = learner.prediction(for: app, after: date, now: now) else {
            return .failure(.neverOpened)
        }
        if let lastRefresh, date < lastRefresh.addingTimeInterval(configuration.freshness.seconds) {
            return .failure(.stillFresh(until: lastRefresh.addingTimeInterval(configuration.freshness.seconds)))
        }
        let cap = dailyCap(for: app, learner: learner, now: now)
        if wakesInLastDay >= cap { return .failure(.budgetSpent(spent: wakesInLastDay, cap: cap)) }
        guard prediction.expectedStarts >= threshold else {
            return .failure(.belowThreshold(prediction, threshold: threshold))
        }
        // "Used every day at 12:00, fetched at 11:50": hold the wake while the sessions it serves
        // are all still ahead of the next step and waiting loses none of them.
        let step = configuration.step
        if let soon = learner.prediction(for: app, after: date, within: step, now: now),
            soon.expectedStarts < 0.1 * prediction.expectedStarts,
            let later = learner.prediction(for: app, after: date.addingTimeInterval(step.seconds), now: now),
            later.expectedStarts >= prediction.expectedStarts
        {
            return .failure(.closerToTheOpen(prediction, threshold: threshold))
        }
        return .success(PlannedWake(at: date, prediction: prediction, threshold: threshold))
    }

    /// The wakes planned over `hours` from `notBefore` if nothing new happens: each on the grid,
    /// where the expected value first reaches the threshold once the previous one has gone stale.
    ///
    /// - Parameter recentWakes: the app's wakes before `now`, to count against its daily cap.
    public func forecast(
        _ app: String, learner: UsageLearner, threshold: Double, lastRefresh: Date?, recentWakes: [Date],
        notBefore: Date,
        until end: Date, now: Date
    ) -> (wakes: [PlannedWake], lastHoldback: Holdback?) {
        var wakes: [PlannedWake] = []
        var refresh = lastRefresh
        var spent = recentWakes
        var holdback: Holdback?
        var date = max(now, notBefore)
        while date <= end {
            let dayAgo = date.addingTimeInterval(-86400)
            spent.removeAll { $0 <= dayAgo }
            switch evaluate(
                app, at: date, learner: learner, threshold: threshold, lastRefresh: refresh,
                wakesInLastDay: spent.count, now: now)
            {
            case .success(let wake):
                wakes.append(wake)
                refresh = date
                spent.append(date)
                holdback = nil
            case .failure(let reason):
                holdback = reason
                if case .neverOpened = reason { return (wakes, reason) }
            }
            date = nextGridPoint(after: date)
        }
        return (wakes, holdback)
    }

    /// The next planned wake within the horizon, or why there is none (the spent budget, or the
    /// best chance in the horizon and the threshold it missed).
    public func nextWake(
        _ app: String, learner: UsageLearner, threshold: Double, lastRefresh: Date?, recentWakes: [Date],
        notBefore: Date, now: Date
    ) -> Result<PlannedWake, Holdback> {
        var date = max(now, notBefore)
        let end = now.addingTimeInterval(configuration.horizon.seconds)
        var spent = recentWakes
        var first: Holdback?
        while date <= end {
            let dayAgo = date.addingTimeInterval(-86400)
            spent.removeAll { $0 <= dayAgo }
            switch evaluate(
                app, at: date, learner: learner, threshold: threshold, lastRefresh: lastRefresh,
                wakesInLastDay: spent.count, now: now)
            {
            case .success(let wake): return .success(wake)
            case .failure(let reason):
                switch reason {
                case .neverOpened: return .failure(reason)
                case .budgetSpent: first = reason
                case .belowThreshold(let prediction, _):
                    // Nothing reached the bar: say how close the best moment came.
                    if case .belowThreshold(let best, _) = first, best.expectedStarts >= prediction.expectedStarts {
                        break
                    }
                    if case .budgetSpent = first { break }
                    first = reason
                case .stillFresh, .closerToTheOpen: first = first ?? reason
                }
            }
            date = nextGridPoint(after: date)
        }
        return .failure(first ?? .neverOpened)
    }

    func nextGridPoint(after date: Date) -> Date {
        let step = configuration.step.seconds
        return Date(timeIntervalSince1970: ((date.timeIntervalSince1970 / step).rounded(.down) + 1) * step)
    }
}
