import Foundation

/// The chance that an app is opened within the next `horizon`, from the user's past only: a
/// per-user logistic model over a few features of the app's and the user's history, trained
/// online on moments whose outcome has become known.
///
/// Pure and explainable: `estimate` gives the probability and each feature's pull on it (its
/// weight times its standardised value), so `bgctl why` can name what moved it most.
public struct OpenPredictor: Sendable {
    public struct Configuration: Hashable, Sendable {
        /// How far ahead an estimate looks (an open within it counts as predicted).
        public var horizon: Double
        /// SGD step and L2 penalty.
        public var learningRate: Double
        public var l2: Double

        /// The step is small: the model sees tens of thousands of moments a month, and a larger
        /// one chases the last day (0.02 lost 0.03 of fresh opens at every budget on the dev trace).
        public init(horizon: Duration = .seconds(3600), learningRate: Double = 0.002, l2: Double = 1e-4) {
            self.horizon = horizon.seconds
            self.learningRate = learningRate
            self.l2 = l2
        }
    }

    /// The features, in order. Each is a plain function of the history at `t`.
    public enum Feature: String, CaseIterable, Sendable {
        case sinceLastOpen, sinceSecondLastOpen, gapRatio
        case overallRate, hourOfDayRate, hourOfWeekRate
        case days7, days28, sameWeekday
        case userIdle, userActiveLastHour, coUsage, firstAfterIdle, morningHabit
    }

    /// An estimate and why.
    public struct Estimate: Sendable {
        public var probability: Double
        /// Each feature's pull on the log-odds, in `Feature.allCases` order.
        public var contributions: [Double]

        /// The features that moved the estimate most, strongest first.
        public func strongest(_ count: Int) -> [(Feature, Double)] {
            zip(Feature.allCases, contributions).sorted { abs($0.1) > abs($1.1) }.prefix(count).map { ($0.0, $0.1) }
        }
    }

    public let configuration: Configuration
    private var weights: [Double]
    private var bias: Double
    /// Running mean and variance of each feature (Welford), for standardising.
    private var mean: [Double]
    private var m2: [Double]
    private var seen = 0.0
    /// Examples waiting for their outcome: (when, app, features).
    private var pending: [(t: Double, app: String, x: [Double])] = []
    public private(set) var examplesLearned = 0

    public init(configuration: Configuration = .init()) {
        self.configuration = configuration
        let n = Feature.allCases.count
        weights = Array(repeating: 0, count: n)
        bias = -3  // opens in the next hour are rare: start there, not at even odds
        mean = Array(repeating: 0, count: n)
        m2 = Array(repeating: 0, count: n)
    }

    /// The features of `app` at `t`.
    public static func features(of app: String, at t: Double, in history: OpenHistory, horizon: Double) -> [Double] {
        let times = history.opens[app] ?? []
        let last = times.last.map { t - $0 } ?? 30 * 86400
        let secondLast = times.count >= 2 ? t - times[times.count - 2] : 60 * 86400
        var gaps: [Double] = []
        if times.count >= 3 {
            for i in max(1, times.count - 20)..<times.count { gaps.append(times[i] - times[i - 1]) }
        }
        let typicalGap = gaps.isEmpty ? 86400 : gaps.sorted()[gaps.count / 2]
        let idle = history.allOpens.last.map { t - $0 } ?? 30 * 86400
        let isLongIdle = idle >= history.configuration.longIdle
        func logMinutes(_ seconds: Double) -> Double { log1p(max(0, seconds) / 60) }
        return [
            logMinutes(last), logMinutes(secondLast), log((last + 60) / (typicalGap + 60)),
            log(1e-3 + history.overallRate(of: app, at: t)),
            log(1e-3 + history.dayRate(of: app, at: t, length: horizon)),
            log(1e-3 + history.weekRate(of: app, at: t, length: horizon)),
            history.shareOfDays(with: app, at: t, length: horizon, days: 7),
            history.shareOfDays(with: app, at: t, length: horizon, days: 28),
            history.shareOfDays(with: app, at: t, length: horizon, days: 4, stride: 7),
            logMinutes(idle), log1p(Double(history.recentOpens(at: t, within: 3600))),
            history.coUsage(of: app, at: t), isLongIdle ? history.afterIdleShare(of: app) : 0,
            history.morningHabit(of: app, at: t),
        ]
    }

    /// The chance of an open within the horizon, with each feature's pull.
    public func estimate(_ x: [Double]) -> Estimate {
        var z = bias
        var contributions = Array(repeating: 0.0, count: x.count)
        for i in x.indices {
            let c = weights[i] * standardised(x[i], i)
            contributions[i] = c
            z += c
        }
        return Estimate(probability: 1 / (1 + exp(-z)), contributions: contributions)
    }

    private func standardised(_ value: Double, _ i: Int) -> Double {
        guard seen > 1 else { return 0 }
        let variance = m2[i] / (seen - 1)
        return variance > 1e-12 ? (value - mean[i]) / variance.squareRoot() : 0
    }

    /// Remembers that `app` had features `x` at `t`; learned once its horizon has passed.
    public mutating func observe(_ app: String, at t: Double, features x: [Double]) {
        pending.append((t, app, x))
    }

    /// Learns every pending example whose horizon ended by `now`: positive when the app was
    /// opened within it.
    public mutating func learn(upTo now: Double, history: OpenHistory) {
        var kept = 0
        for example in pending {
            guard example.t + configuration.horizon <= now else {
                pending[kept] = example
                kept += 1
                continue
            }
            let times = history.opens[example.app] ?? []
            let next = times.first(notBefore: example.t + 1e-6)
            let label = (next.map { $0 <= example.t + configuration.horizon } ?? false) ? 1.0 : 0.0
            update(example.x, label: label)
        }
        pending.removeLast(pending.count - kept)
    }

    private mutating func update(_ x: [Double], label: Double) {
        seen += 1
        for i in x.indices {
            let delta = x[i] - mean[i]
            mean[i] += delta / seen
            m2[i] += delta * (x[i] - mean[i])
        }
        let p = estimate(x).probability
        let error = p - label
        let rate = configuration.learningRate
        for i in x.indices {
            weights[i] -= rate * (error * standardised(x[i], i) + configuration.l2 * weights[i])
        }
        bias -= rate * error
        examplesLearned += 1
    }
}
