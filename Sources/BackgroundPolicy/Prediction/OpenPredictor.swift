import Foundation

/// The chance that an app is opened within the next `horizon`, from the user's past only: a
/// per-user logistic model over a few features of the app's and the user's history, trained on
/// moments whose outcome has become known.
///
/// Training: every labelled moment nudges the weights (a small stochastic-gradient step) until
/// a day of examples exists; from then on, once a day, the weights are refitted exactly
/// (`LogisticFit`, Newton's method) to the last `memory` of examples — every positive and one
/// negative in `negativeSampling`, weighted back up. The daily exact fit is what "retrained
/// daily on windows whose outcome is known" means, and on the dev trace it is worth +0.02 of
/// fresh opens at every budget over the online steps alone. The nine features of the app's own
/// history also enter squared, so each may bend (+0.01 at 1.5× and 2×).
///
/// Pure and explainable: `estimate` gives the probability and each feature's pull on it (its
/// weights times its standardised value and square), so `bgctl why` can name what moved it most.
public struct OpenPredictor: Sendable {
    public struct Configuration: Hashable, Sendable {
        /// How far ahead an estimate looks (an open within it counts as predicted).
        public var horizon: Double
        /// SGD step and L2 penalty.
        public var learningRate: Double
        public var l2: Double
        /// How often the weights are refitted to the kept examples, and how far back those go.
        public var refitEvery: Double
        public var memory: Double
        /// One negative example in this many is kept (and weighs this many): positives are
        /// rare, and every one is kept.
        public var negativeSampling: Int
        /// The refit's L2 penalty per unit of example weight: a strong prior while a few days of
        /// examples exist, next to nothing once months do (a fixed penalty flattened a two-week
        /// habit into a wake 80 minutes early).
        public var ridge: Double

        /// The step is small: the model sees tens of thousands of moments a month, and a larger
        /// one chases the last day (0.02 lost 0.03 of fresh opens at every budget on the dev trace).
        /// The refit's settings moved the dev trace's frontier by less than ±0.006 between a
        /// refit every 6 or 24 h, 14, 28 or 60 days of memory, one negative in 4 to 20, a ridge
        /// of 1e-5 to 1e-4 per unit of weight (or a fixed 0.1 to 10): they are round numbers,
        /// not fitted ones.
        public init(
            horizon: Duration = .seconds(3600), learningRate: Double = 0.002, l2: Double = 1e-4,
            refitEvery: Duration = .seconds(86400), memory: Duration = .seconds(28 * 86400),
            negativeSampling: Int = 10, ridge: Double = 1e-4
        ) {
            self.horizon = horizon.seconds
            self.learningRate = learningRate
            self.l2 = l2
            self.refitEvery = max(3600, refitEvery.seconds)
            self.memory = memory.seconds
            self.negativeSampling = max(1, negativeSampling)
            self.ridge = max(0, ridge)
        }
    }

    /// The features, in order. Each is a plain function of the history at `t`.
    public enum Feature: String, CaseIterable, Sendable {
        case sinceLastOpen, sinceSecondLastOpen, gapRatio
        case overallRate, hourOfDayRate, hourOfWeekRate
        case days7, days28, sameWeekday
        case userIdle, userActiveLastHour, coUsage, firstAfterIdle, morningHabit

        /// Its place in a feature vector.
        var index: Int { Self.allCases.firstIndex(of: self)! }
    }

    /// An estimate and why.
    public struct Estimate: Sendable {
        public var probability: Double
        /// Each feature's pull on the log-odds, in `Feature.allCases` order.
        public var contributions: [Double]
        /// What the probability was scaled by for this time of day (`EstimateCheck`; 1: not).
        public var timeOfDayFactor: Double = 1

        /// The features that moved the estimate most, strongest first.
        public func strongest(_ count: Int) -> [(Feature, Double)] {
            zip(Feature.allCases, contributions).sorted { abs($0.1) > abs($1.1) }.prefix(count).map { ($0.0, $0.1) }
        }
    }

    public let configuration: Configuration
    /// Weights of the model's inputs: the features, then the squares of the first `bent`.
    private var weights: [Double]
    private var bias: Double
    /// Running mean and variance of each input, for standardising: of every example learned,
    /// less the days `forgetMoments` dropped.
    private var moments: InputMoments
    /// The same moments per day of the examples' times (oldest first), so a day's can be taken
    /// back out when the model forgets it.
    private var dailyMoments: [(day: Double, moments: InputMoments)] = []
    /// Examples waiting for their outcome: (when, app, features).
    private var pending: [(t: Double, app: String, x: [Double])] = []
    public private(set) var examplesLearned = 0
    /// Labelled examples kept for the refit, oldest first: their times, labels and features
    /// (`Feature.allCases.count` each, as `Float`: the month kept is a few megabytes at most).
    private var keptTimes: [Double] = []
    private var keptLabels: [Bool] = []
    private var keptFeatures: [Float] = []
    private var negativesSeen = 0
    private var lastRefit: Double?
    public private(set) var refits = 0
    /// No refit before this: a rebuild replaying months of opens needs only the refits of its
    /// last days (see `deferRefits`).
    private var refitsDeferredUntil = -Double.infinity
    /// How many labelled examples the next refit has to fit.
    public var examplesKept: Int { keptTimes.count }

    /// One input of the model: a feature, a feature squared, or two features' product.
    enum Input {
        case feature(Int), square(Int), product(Int, Int)

        /// Its value for the features read by `x` (by index): a closure, not a generic
        /// collection, because a refit reads every kept row several times and in a debug build
        /// (the test suite replays the dev trace in one) a generic read per value costs many
        /// times more.
        @inline(__always)
        func value(_ x: (Int) -> Double) -> Double {
            switch self {
            case .feature(let i): x(i)
            case .square(let i): x(i) * x(i)
            case .product(let i, let k): x(i) * x(k)
            }
        }
    }

    /// The model's inputs: every feature; the squares of the nine of the app's own history
    /// (times since opens, rates, shares of days), whose effect need not be a straight line in
    /// the log-odds; and how active the user has been in the last hour times the app's rate at
    /// this hour of the day — while the user is at the phone, the hour's habits say more.
    /// (Measured on the dev trace at 1× / 2× / 4×: the squares +0.000 / +0.010 / +0.001; the
    /// product +0.010 / 0 / +0.006, and on each user alone and the shifted trace +0.007 to
    /// +0.014 at 1×. Eight other products were tried: none helped at every budget.)
    static let inputDefinitions: [Input] =
        Feature.allCases.indices.map { Input.feature($0) } + (0..<9).map { Input.square($0) }
        + [.product(Feature.userActiveLastHour.index, Feature.hourOfDayRate.index)]
    static let inputs = inputDefinitions.count
    static let featureCount = Feature.allCases.count

    public init(configuration: Configuration = .init()) {
        self.configuration = configuration
        let n = Self.inputs
        weights = Array(repeating: 0, count: n)
        bias = -3  // opens in the next hour are rare: start there, not at even odds
        moments = InputMoments(inputs: n)
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
        for (i, input) in Self.inputDefinitions.enumerated() {
            let c = weights[i] * standardised(input.value { x[$0] }, i)
            // A square's pull is its feature's; a product's is shared by its two.
            switch input {
            case .feature(let f), .square(let f): contributions[f] += c
            case .product(let f, let g):
                contributions[f] += c / 2
                contributions[g] += c / 2
            }
            z += c
        }
        return Estimate(probability: 1 / (1 + exp(-z)), contributions: contributions)
    }

    /// The model's inputs for features `x`.
    static func input(_ x: [Double]) -> [Double] {
        inputDefinitions.map { input in input.value { x[$0] } }
    }

    private func standardised(_ value: Double, _ i: Int) -> Double {
        let scale = standardisation(i)
        return (value - scale.mean) * scale.inverse
    }

    /// The mean and 1 ÷ standard deviation input `i` is standardised by (0 for an input that
    /// has not varied yet: it moves nothing).
    private func standardisation(_ i: Int) -> (mean: Double, inverse: Double) {
        guard moments.count > 1 else { return (0, 0) }
        let variance = moments.m2[i] / (moments.count - 1)
        return variance > 1e-12 ? (moments.mean[i], 1 / variance.squareRoot()) : (0, 0)
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
            let label = history.isOpened(example.app, after: example.t, within: configuration.horizon) ? 1.0 : 0.0
            update(example.x, at: example.t, label: label)
            keep(example.x, at: example.t, label: label > 0)
        }
        pending.removeLast(pending.count - kept)
        if let firstKept = keptTimes.first, now - firstKept >= configuration.refitEvery,
            now - (lastRefit ?? -.infinity) >= configuration.refitEvery, now >= refitsDeferredUntil
        {
            lastRefit = now
            refit(at: now)
        }
    }

    /// Skips the refits a replay would make before `t`. The exact fit does not depend on the
    /// weights it starts from, only on the kept examples (which are kept all the same), so the
    /// first refit at or after `t` lands where the daily ones would have; only the scores of
    /// moments before it differ (`LearnedUsage.rebuilt` defers to where none of those is kept).
    public mutating func deferRefits(until t: Double) { refitsDeferredUntil = t }

    private mutating func keep(_ x: [Double], at t: Double, label: Bool) {
        if !label {
            negativesSeen += 1
            guard negativesSeen % configuration.negativeSampling == 0 else { return }
        }
        keptTimes.append(t)
        keptLabels.append(label)
        keptFeatures.append(contentsOf: x.map { Float($0) })
    }

    /// Fits the weights exactly to the kept examples of the last `memory` (from the current
    /// weights), standardised as the model standardises now.
    private mutating func refit(at now: Double) {
        let drop = keptTimes.firstIndex(notBefore: now - configuration.memory)
        if drop > 0 {
            keptTimes.removeFirst(drop)
            keptLabels.removeFirst(drop)
            keptFeatures.removeFirst(drop * Self.featureCount)
        }
        guard keptLabels.contains(true), keptLabels.contains(false) else { return }
        let examples = KeptExamples(
            features: keptFeatures, labels: keptLabels, negativeWeight: Double(configuration.negativeSampling),
            scales: (0..<Self.inputs).map { standardisation($0) })
        let fit = LogisticFit(examples, ridge: configuration.ridge * examples.totalWeight)
        let solved = fit.solve(from: [bias] + weights)
        bias = solved[0]
        weights = Array(solved.dropFirst())
        refits += 1
    }

    /// Takes the examples of the days that ended before `t` out of the moments inputs are
    /// standardised by, as `OpenHistory.forget` takes old opens out of the features: a model
    /// that has run for months then standardises as one rebuilt from the opens bgd keeps, not
    /// by every example since it started.
    public mutating func forgetMoments(before t: Double) {
        let keep = dailyMoments.firstIndex { ($0.day + 1) * 86400 > t } ?? dailyMoments.endIndex
        guard keep > 0 else { return }
        for (_, day) in dailyMoments[..<keep] { moments.remove(day) }
        dailyMoments.removeFirst(keep)
    }

    private mutating func update(_ features: [Double], at t: Double, label: Double) {
        let x = Self.input(features)
        moments.add(x)
        let day = (t / 86400).rounded(.down)
        if dailyMoments.last?.day != day {
            dailyMoments.append((day, InputMoments(inputs: x.count)))
        }
        dailyMoments[dailyMoments.count - 1].moments.add(x)
        examplesLearned += 1
        // After the first refit, the daily exact fits alone set the weights.
        guard refits == 0 else { return }
        let p = estimate(features).probability
        let error = p - label
        let rate = configuration.learningRate
        for i in x.indices {
            weights[i] -= rate * (error * standardised(x[i], i) + configuration.l2 * weights[i])
        }
        bias -= rate * error
    }
}

/// The count, mean and sum of squared deviations of each input over some examples (Welford), and
/// what is left once a part of them is taken out (Chan et al.'s merge, reversed).
struct InputMoments: Sendable {
    var count: Double
    var mean: [Double]
    var m2: [Double]

    /// Of no example yet.
    init(inputs: Int) { (count, mean, m2) = (0, Array(repeating: 0, count: inputs), Array(repeating: 0, count: inputs)) }

    mutating func add(_ x: [Double]) {
        count += 1
        for i in x.indices {
            let delta = x[i] - mean[i]
            mean[i] += delta / count
            m2[i] += delta * (x[i] - mean[i])
        }
    }

    /// Takes out `part`, a subset of the examples these moments count.
    mutating func remove(_ part: InputMoments) {
        let rest = count - part.count
        guard rest > 0.5 else {
            self = InputMoments(inputs: mean.count)
            return
        }
        for i in mean.indices {
            let restMean = (count * mean[i] - part.count * part.mean[i]) / rest
            let delta = part.mean[i] - restMean
            m2[i] = max(0, m2[i] - part.m2[i] - delta * delta * rest * part.count / count)
            mean[i] = restMean
        }
        count = rest
    }
}

/// The kept examples as the refit reads them: each row made when it is read (standardised as
/// the model standardises now), never all at once.
private struct KeptExamples: LogisticExamples {
    let features: [Float]
    let labels: [Bool]
    let negativeWeight: Double
    let scales: [(mean: Double, inverse: Double)]

    var count: Int { labels.count }
    var width: Int { OpenPredictor.inputs + 1 }
    var totalWeight: Double {
        let positives = labels.reduce(0) { $0 + ($1 ? 1 : 0) }
        return Double(positives) + Double(count - positives) * negativeWeight
    }

    func label(_ i: Int) -> Double { labels[i] ? 1 : 0 }
    func weight(_ i: Int) -> Double { labels[i] ? 1 : negativeWeight }

    func fill(_ i: Int, into row: UnsafeMutableBufferPointer<Double>) {
        let offset = i * OpenPredictor.featureCount
        row[0] = 1
        features.withUnsafeBufferPointer { features in
            for (j, input) in OpenPredictor.inputDefinitions.enumerated() {
                row[j + 1] = (input.value { Double(features[offset + $0]) } - scales[j].mean) * scales[j].inverse
            }
        }
    }
}
