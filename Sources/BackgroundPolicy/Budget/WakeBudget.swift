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
/// Within it, a threshold on the planner's score decides *which* wakes: it moves by how the
/// wakes spent over the last days compare with the budget (spending twice the budget doubles it
/// over a day), slowly, so that a quiet night does not lower it and spend what the morning
/// needs. It is in the score's own units and moves by factors, so the same controller serves a
/// probability, a rate or a rank.
public struct WakeBudget: Hashable, Sendable {
    public let wakesPerOpen: Double
    public private(set) var threshold: Double
    /// Wakes earned and not spent; below zero, borrowed.
    public private(set) var balance = 0.0
    private var opens: [Double] = []
    private var firstOpen: Double?
    /// Wakes spent and budget earned, decayed with `memory`, for the threshold.
    private var spent = 0.0
    private var allowed = 0.0
    private var lastAdjust: Double?

    /// Quiet days may save up to two days' budget; a morning may borrow half a day's.
    public static let savingDays = 2.0
    public static let creditDays = 0.5
    static let pace = 7.0 * 86400
    static let memory = 2.0 * 86400
    public static let thresholdRange = 1e-4...1e4

    public init(wakesPerOpen: Double, initialThreshold: Double) {
        self.wakesPerOpen = wakesPerOpen
        threshold = min(Self.thresholdRange.upperBound, max(Self.thresholdRange.lowerBound, initialThreshold))
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
        // Only the last week is read: drop older opens now and then, not on every open.
        if opens.count > 4096, opens[2048] < t - Self.pace { opens.removeFirst(2048) }
        balance = min(balance + wakesPerOpen, Self.savingDays * dailyAllowance(at: t))
    }

    /// Whether a wake scoring `score` may go at `t`.
    public func allows(_ score: Double, at t: Double) -> Bool {
        score >= threshold && balance - 1 >= -Self.creditDays * dailyAllowance(at: t)
    }

    public mutating func spend(at t: Double) {
        balance -= 1
        spent += 1
    }

    /// Moves the threshold for the time since the last call, by the wakes spent over the budget.
    public mutating func adjust(at t: Double) {
        defer { lastAdjust = max(lastAdjust ?? t, t) }
        guard let last = lastAdjust, t > last else { return }
        let elapsed = t - last
        let factor = exp(-elapsed / Self.memory)
        spent *= factor
        allowed = allowed * factor + dailyAllowance(at: t) * elapsed / 86400
        guard allowed > 0.5 else { return }
        let ratio = min(4, max(0.25, (spent + 0.5) / allowed))
        threshold = min(
            Self.thresholdRange.upperBound, max(Self.thresholdRange.lowerBound, threshold * pow(ratio, elapsed / 86400))
        )
    }
}
