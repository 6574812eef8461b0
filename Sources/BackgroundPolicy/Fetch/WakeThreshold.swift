import Foundation

/// The least value a wake must promise — expected session starts it will serve — adjusted day by
/// day so that the wakes actually spent match the budget.
///
/// A fixed cut-off would spend whatever the habits of the day allow; a budget alone would spend
/// early wakes on poor chances. So the bar moves: a day that spent twice its budget doubles it,
/// a day that spent half halves it (at most ×2 either way), and it settles where the budget goes
/// to the best chances.
public struct WakeThreshold: Hashable, Sendable {
    public private(set) var value: Double
    public private(set) var periodStart: Date?
    public private(set) var spentInPeriod = 0
    /// Bounds, so that one odd day cannot freeze or flood the schedule.
    public static let range = 0.01...10.0

    public init(initial: Double = 0.3) { value = min(Self.range.upperBound, max(Self.range.lowerBound, initial)) }

    public mutating func recordWake() { spentInPeriod += 1 }

    /// Closes the day if one has passed since the last adjustment, given the wakes a day the
    /// budget allows. A clock that went backwards restarts the period.
    public mutating func update(now: Date, budgetPerDay: Double) {
        guard let start = periodStart, now >= start else {
            periodStart = now
            spentInPeriod = 0
            return
        }
        let elapsed = now.timeIntervalSince(start) / 86400
        guard elapsed >= 1 else { return }
        let budget = budgetPerDay * elapsed
        if budget > 0 {
            let ratio = min(2, max(0.5, Double(spentInPeriod) / budget))
            value = min(Self.range.upperBound, max(Self.range.lowerBound, value * ratio))
        }
        periodStart = now
        spentInPeriod = 0
    }
}
