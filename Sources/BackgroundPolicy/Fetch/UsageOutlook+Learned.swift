import BackgroundModel
import Foundation

/// The learned planner in the fetch policy: the next moment the per-user model's chance of an
/// open reaches the user's threshold, with the features that moved it most as the reason.
extension UsageOutlook {
    /// How far ahead the learned planner looks for the next wake.
    static let learnedHorizon = 86400.0

    func refine(
        _ decision: WakeDecision, learned: LearnedUsage, for candidate: FetchCandidate, earliest: Date, now: Date
    ) -> WakeDecision {
        var decision = decision
        let lastWake = candidate.recentRuns.first.map { min($0.startedAt, now).timeIntervalSince1970 }
        let from = max(earliest, now).timeIntervalSince1970
        switch learned.nextWake(
            candidate.app.rawValue, lastWake: lastWake, notBefore: from,
            until: now.timeIntervalSince1970 + Self.learnedHorizon)
        {
        case .success(let wake):
            decision.dueAt = Date(timeIntervalSince1970: wake.at)
            decision.spacing = nil
            decision.reasons.append(DecisionReason(.predictedOpen, Self.describe(wake, learned: learned)))
        case .failure(let holdback):
            decision.dueAt = nil
            decision.reasons.append(Self.reason(for: holdback, learned: learned))
        }
        return decision
    }

    /// The wakes the learned planner would make from `from` to `end` if nothing new happens.
    func forecastLearned(
        _ learned: LearnedUsage, app: AppID, lastWake: Date?, from: Date, until end: Date
    ) -> (wakes: [WakeForecast.Wake], holdback: DecisionReason?) {
        var wakes: [WakeForecast.Wake] = []
        var woke = lastWake?.timeIntervalSince1970
        var t = from.timeIntervalSince1970
        while t <= end.timeIntervalSince1970 {
            switch learned.nextWake(app.rawValue, lastWake: woke, notBefore: t, until: end.timeIntervalSince1970) {
            case .success(let wake):
                wakes.append(
                    WakeForecast.Wake(
                        at: Date(timeIntervalSince1970: wake.at), expectedStarts: wake.estimate.probability,
                        reason: DecisionReason(.predictedOpen, Self.describe(wake, learned: learned))))
                woke = wake.at
                t = wake.at + 1
            case .failure(let holdback):
                return (wakes, wakes.isEmpty ? Self.reason(for: holdback, learned: learned) : nil)
            }
        }
        return (wakes, nil)
    }

    /// "0.46 chance of an open within 60 min of 11:50 (threshold 0.31): hour of week +0.82, …".
    static func describe(_ wake: LearnedUsage.PlannedWake, learned: LearnedUsage) -> String {
        "\(describe(wake.estimate, at: wake.at, learned: learned)) (threshold \(number(wake.threshold)))"
    }

    static func describe(_ estimate: OpenPredictor.Estimate, at t: Double, learned: LearnedUsage) -> String {
        let minutes = Int(learned.configuration.freshFor / 60)
        let factors = estimate.strongest(3).filter { abs($0.1) >= 0.005 }.map {
            "\($0.0.label) \(String(format: "%+.2f", $0.1))"
        }
        let checked =
            abs(estimate.timeOfDayFactor - 1) >= 0.005
            ? "; ×\(number(estimate.timeOfDayFactor)) for the time of day (how last week's estimates then came true)" : ""
        return "\(number(estimate.probability)) chance of an open within \(minutes) min of "
            + "\(WireCoding.format(Date(timeIntervalSince1970: t)))"
            + (factors.isEmpty ? " (nothing learned yet)" : "; moved most by \(factors.joined(separator: ", "))")
            + checked
    }

    static func reason(for holdback: LearnedUsage.Holdback, learned: LearnedUsage) -> DecisionReason {
        switch holdback {
        case .neverOpened:
            return DecisionReason(.noLikelyOpen, "no recorded opens to predict from")
        case .stillFresh(let until):
            return DecisionReason(
                .stillFresh,
                "the last refresh keeps the content fresh until \(WireCoding.format(Date(timeIntervalSince1970: until)))"
            )
        case .budgetSpent(let balance):
            return DecisionReason(
                .dailyBudgetSpent,
                "the user's wakes are spent (balance \(number(balance)) of \(number(learned.budget.dailyAllowance(at: learned.history.allOpens.last ?? 0))) a day); opens earn more"
            )
        case .belowThreshold(let at, let estimate, let threshold):
            return DecisionReason(
                .noLikelyOpen,
                "nothing in the next 24 h reaches the threshold of \(number(threshold)); best: \(describe(estimate, at: at, learned: learned))"
            )
        }
    }
}

extension OpenPredictor.Feature {
    /// How `bgctl why` names the feature.
    public var label: String {
        switch self {
        case .sinceLastOpen: "time since its last open"
        case .sinceSecondLastOpen: "time since the open before"
        case .gapRatio: "gap against its usual gap"
        case .overallRate: "its opens a day"
        case .hourOfDayRate: "hour of day"
        case .hourOfWeekRate: "hour of week"
        case .days7: "days of the last week with an open now"
        case .days28: "days of the last 4 weeks with an open now"
        case .sameWeekday: "same weekday"
        case .userIdle: "time the user has been idle"
        case .userActiveLastHour: "user's opens in the last hour"
        case .coUsage: "apps just opened"
        case .firstAfterIdle: "first thing after a long idle"
        case .morningHabit: "morning habit"
        }
    }
}
