import Foundation

/// Keeps a user's wakes within `wakesPerOpen` × their opens, online, in two parts.
///
/// A hard limit, as a balance: every open earns `wakesPerOpen` wakes, every wake spends one, and
/// no wake goes that would take the balance below the credit. Quiet days may save up to
/// `savingDays` of budget for busy ones, and a morning may borrow `creditDays` before the day's
/// opens have earned it — the first wakes of a day are the ones that matter most, and a bucket
/// filled only by opens as they happen starves them (on the dev trace, a rolling 24-hour cap at
/// the week's pace lost 0.05–0.07 of fresh opens at every budget).
///
/// Within it, a threshold on the planner's score decides *which* wakes: once an hour it is
/// refitted to the lowest score at which the last week's candidates would have spent the last
/// week's budget (`ThresholdFit`), so it follows the user's pace and the planner's drift within
/// hours, not days. It is in the score's own units, so the same controller serves a probability,
/// a rate or a rank. Until a day of history exists it stays at its initial value.
///
/// The fit aims at the week's budget scaled by budget ÷ wakes actually spent (within 0.8–1.25):
/// the candidates were scored by the model as it was then, and a model refitted since scores
/// differently, so the fitted threshold alone left 3 % of the learned planner's budget unspent
/// on the dev trace (0.606 of opens fresh at 0.97× → 0.614 at 0.99×).
public struct WakeBudget: Sendable {
    public let wakesPerOpen: Double
    public private(set) var threshold: Double
    /// Wakes earned and not spent; below zero, borrowed.
    public private(set) var balance = 0.0
    private var opens: [Double] = []
    private var wakes: [Double] = []
    private var firstOpen: Double?
    private var fit: ThresholdFit
    private var lastFit: Double?

    /// Quiet days may save up to two days' budget; a morning may borrow half a day's.
    public static let savingDays = 2.0
    public static let creditDays = 0.5
    static let pace = 7.0 * 86400
    static let refitEvery = 3600.0
    public static let thresholdRange = 1e-4...1e4
    /// How far the fit's target may be scaled by budget ÷ spent.
    static let makeUp = 0.8...1.25

    public init(wakesPerOpen: Double, initialThreshold: Double, rewake: Duration = .seconds(3600)) {
        self.wakesPerOpen = wakesPerOpen
        threshold = min(Self.thresholdRange.upperBound, max(Self.thresholdRange.lowerBound, initialThreshold))
        fit = ThresholdFit(window: .seconds(Self.pace), rewake: rewake)
    }

    /// The user's opens a day over the last week (or since their first open, if sooner; at
    /// least a day).
    public func opensPerDay(at t: Double) -> Double {
        guard let firstOpen else { return 0 }
        let days = max(1, min(Self.pace, t - firstOpen) / 86400)
        return Double(opens.count(notBefore: t - Self.pace)) / days
    }

    /// A day's budget at the user's pace.
    public func dailyAllowance(at t: Double) -> Double { wakesPerOpen * opensPerDay(at: t) }

    public mutating func recordOpen(at t: Double) {
        if firstOpen == nil { firstOpen = t }
        opens.append(t)
        opens.dropSomeBefore(t - Self.pace)
        balance = min(balance + wakesPerOpen, Self.savingDays * dailyAllowance(at: t))
    }

    /// Whether a wake scoring `score` may go at `t`.
    public func allows(_ score: Double, at t: Double) -> Bool {
        score >= threshold && balance - 1 >= -Self.creditDays * dailyAllowance(at: t)
    }

    public mutating func spend(at t: Double) {
        balance -= 1
        wakes.append(t)
        wakes.dropSomeBefore(t - Self.pace)
    }

    /// Remembers a wake the planner considered at `t` (woken or not): what the threshold is
    /// fitted to. `lastOpen` is the app's last open (an open lets the app be woken again).
    public mutating func consider(_ app: String, score: Double, at t: Double, lastOpen: Double) {
        fit.record(app, score: score, at: t, lastOpen: lastOpen)
    }

    /// Refits the threshold to the last week when an hour has passed since the last fit.
    public mutating func adjust(at t: Double) {
        guard let firstOpen, t - firstOpen >= 86400, t - (lastFit ?? -.infinity) >= Self.refitEvery else { return }
        lastFit = t
        let window = min(Self.pace, t - firstOpen)
        var budget = wakesPerOpen * Double(opens.count(notBefore: t - window))
        if t - firstOpen >= Self.pace {
            // Make up what the last week left unspent (or hold back what it overspent).
            let spent = Double(wakes.count(notBefore: t - window))
            budget *= min(Self.makeUp.upperBound, max(Self.makeUp.lowerBound, budget / max(1, spent)))
        }
        if let fitted = fit.threshold(spending: budget, at: t, from: threshold) {
            threshold = min(Self.thresholdRange.upperBound, max(Self.thresholdRange.lowerBound, fitted))
        }
    }
}

extension Array where Element == Double {
    /// Drops times before `cutoff` now and then, in batches, not on every append: only the last
    /// week is read.
    mutating func dropSomeBefore(_ cutoff: Double) {
        if count > 4096, self[2048] < cutoff { removeFirst(2048) }
    }
}
