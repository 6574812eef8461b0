import BackgroundModel
import Foundation

/// What the usage learner expects, brought to the fetch policy: it moves an interval decision to
/// shortly before the user's likely open, holds it while nothing is likely, or — for an app never
/// opened — spaces it out to the rare wakes of an unused app.
///
/// The interval decision stays the earliest a wake may come (the app's minimum interval, the
/// system floor, backoff after failures, the overrun penalty); the outlook only ever delays it.
public struct UsageOutlook: Sendable {
    public var learner: UsageLearner
    public var planner: AdaptiveWakePlanner
    /// Today's threshold: expected session starts a wake must serve.
    public var threshold: Double
    /// The per-user learned model; when present it plans instead of the adaptive planner.
    public var learned: LearnedUsage?

    public init(learner: UsageLearner, planner: AdaptiveWakePlanner, threshold: Double, learned: LearnedUsage? = nil) {
        self.learner = learner
        self.planner = planner
        self.threshold = threshold
        self.learned = learned
    }

    func refine(
        _ decision: WakeDecision, for candidate: FetchCandidate, unusedAppInterval: Duration?, now: Date
    ) -> WakeDecision {
        guard let earliest = decision.dueAt, !decision.reasons.contains(where: { $0.code == .interruptedRun }) else {
            return decision
        }
        var decision = decision
        let app = candidate.app.rawValue
        if let learned, learned.history.opens[app] != nil {
            if learned.hasLearned {
                return refine(decision, learned: learned, for: candidate, earliest: earliest, now: now)
            }
            // A new install: the model has no day of the user's opens yet, and its estimates are
            // its starting guess. Until it has, an app that was opened is woken as one never
            // opened, not never.
            return Self.rarely(
                decision, candidate: candidate, earliest: earliest, interval: unusedAppInterval, now: now,
                why: Self.learning)
        }
        guard let model = learner.models[app], let lastOpen = model.lastOpen else {
            return Self.rarely(
                decision, candidate: candidate, earliest: earliest, interval: unusedAppInterval, now: now,
                why: "never opened", hint: "report opens with the SDK or `bgctl open`")
        }
        let history = refreshHistory(of: candidate, lastOpen: lastOpen, now: now)
        switch planner.nextWake(
            app, learner: learner, threshold: threshold, lastRefresh: history.lastRefresh,
            recentWakes: history.recentWakes,
            notBefore: earliest, now: now)
        {
        case .success(let wake):
            decision.dueAt = wake.at
            decision.spacing = nil
            decision.reasons.append(
                DecisionReason(.predictedOpen, Self.describe(wake.prediction, at: wake.at, threshold: threshold)))
        case .failure(let holdback):
            decision.dueAt = nil
            decision.reasons.append(reason(for: holdback, app: app, now: now))
        }
        return decision
    }

    /// Why an opened app is woken as one never opened on a new install (`LearnedUsage.hasLearned`).
    static let learning = "learning the user's habits (a day of opens first)"

    /// `decision` held to one wake every `interval` (none given: unchanged), and why.
    private static func rarely(
        _ decision: WakeDecision, candidate: FetchCandidate, earliest: Date, interval: Duration?, now: Date,
        why: String,
        hint: String? = nil
    ) -> WakeDecision {
        guard let interval else { return decision }
        var decision = decision
        let anchor = candidate.recentRuns.first?.startedAt ?? candidate.registeredAt
        // Due now, once, as in `FetchPolicy.dueDecision`: counted from now, the wake was put off
        // by the interval at every pass until the clock caught up.
        let rare =
            FetchPolicy.wasStampedBeforeTheClockWentBack(anchor, now: now) ? now : min(anchor, now).adding(interval)
        if rare > earliest {
            decision.dueAt = rare
            decision.spacing = interval
            decision.reasons.append(
                DecisionReason(
                    .rarelyUsed,
                    "\(why): woken at most every \(interval.humanDescription)\(hint.map { " (\($0))" } ?? "")"))
        }
        return decision
    }

    /// The wakes planned from `now` to `end` if nothing new happens, for `bgctl forecast`.
    /// Conditions that hold every wake (no network, a low battery) leave the forecast empty, with
    /// that as the reason.
    public func forecast(
        for candidate: FetchCandidate, policy: FetchPolicy, conditions: DeviceConditions = .unconstrained,
        until end: Date,
        now: Date
    ) -> WakeForecast {
        let base = policy.dueDecision(for: candidate, now: now)
        let gated = policy.applying(conditions, to: WakeDecision(app: candidate.app, dueAt: now, reasons: []))
        if gated.dueAt == nil {
            return WakeForecast(
                app: candidate.app, from: now, until: end, threshold: threshold, earliest: base.dueAt,
                earliestReasons: base.reasons, wakes: [], holdback: gated.reasons.last)
        }
        let app = candidate.app.rawValue
        if let learned, learned.history.opens[app] != nil, learned.hasLearned, let earliest = base.dueAt {
            let planned = forecastLearned(
                learned, app: candidate.app, lastWake: candidate.recentRuns.first?.startedAt,
                from: max(earliest, now), until: end)
            return WakeForecast(
                app: candidate.app, from: now, until: end, threshold: learned.budget.threshold, earliest: base.dueAt,
                earliestReasons: base.reasons, wakes: planned.wakes, holdback: planned.holdback)
        }
        var wakes: [WakeForecast.Wake] = []
        var holdback: DecisionReason?
        if let earliest = base.dueAt, learned == nil, let lastOpen = learner.models[app]?.lastOpen {
            let history = refreshHistory(of: candidate, lastOpen: lastOpen, now: now)
            let planned = planner.forecast(
                app, learner: learner, threshold: threshold, lastRefresh: history.lastRefresh,
                recentWakes: history.recentWakes,
                notBefore: earliest, until: end, now: now)
            wakes = planned.wakes.map { wake in
                WakeForecast.Wake(
                    at: wake.at, expectedStarts: wake.prediction.expectedStarts,
                    reason: DecisionReason(
                        .predictedOpen, Self.describe(wake.prediction, at: wake.at, threshold: threshold)))
            }
            holdback = planned.lastHoldback.map { reason(for: $0, app: app, now: now) }
        } else if base.dueAt != nil {
            let stillLearning = learned.map { !$0.hasLearned && $0.history.opens[app] != nil } ?? false
            holdback = DecisionReason(
                .rarelyUsed,
                (stillLearning ? Self.learning : "never opened: nothing to predict from")
                    + (policy.configuration.unusedAppInterval.map { "; woken at most every \($0.humanDescription)" }
                        ?? "; woken on its fetch interval"))
        }
        return WakeForecast(
            app: candidate.app, from: now, until: end, threshold: threshold, earliest: base.dueAt,
            earliestReasons: base.reasons,
            wakes: wakes, holdback: holdback)
    }

    /// The wakes the app's use earns in 24 hours (the planner's cap); nil for an app never opened.
    public func dailyWakeBudget(for app: AppID, now: Date) -> Int? {
        if learned != nil { return nil }  // the learned planner budgets the user, not each app
        guard learner.models[app.rawValue]?.lastOpen != nil else { return nil }
        return planner.dailyCap(for: app.rawValue, learner: learner, now: now)
    }

    /// The app's last refresh (its last run or open, a future time counting as now) and the
    /// wakes it had in the 24 hours before `now`.
    private func refreshHistory(
        of candidate: FetchCandidate, lastOpen: Date, now: Date
    ) -> (lastRefresh: Date, recentWakes: [Date]) {
        let lastRun = candidate.recentRuns.first.map { min($0.startedAt, now) }
        // A run the operator asked for (`bgctl simulate fetch`) spends none of the app's wakes:
        // a debugging aid, as Xcode's "Simulate Background Fetch" is (issue 18).
        let recentWakes = candidate.recentRuns.filter { !$0.manual }.map(\.startedAt).filter {
            $0 > now.addingTimeInterval(-86400) && $0 <= now
        }
        return (max(lastRun ?? lastOpen, lastOpen), recentWakes)
    }

    private func reason(for holdback: AdaptiveWakePlanner.Holdback, app: String, now: Date) -> DecisionReason {
        switch holdback {
        case .neverOpened:
            return DecisionReason(.noLikelyOpen, "no recorded opens to predict from")
        case .stillFresh(let until):
            return DecisionReason(
                .stillFresh, "the last refresh keeps the content fresh until \(WireCoding.format(until))")
        case .budgetSpent(let spent, let cap):
            return DecisionReason(.dailyBudgetSpent, "\(spent) wakes in the last 24 h; the app's use earns \(cap)")
        case .belowThreshold(let prediction, let threshold):
            return DecisionReason(
                .noLikelyOpen,
                "nothing in the next \(planner.configuration.horizon.humanDescription) reaches today's threshold of \(Self.number(threshold)) expected session starts; best now: \(Self.describe(prediction, at: now, threshold: threshold))"
            )
        case .closerToTheOpen(let prediction, let threshold):
            return DecisionReason(.closerToTheOpen, Self.describe(prediction, at: now, threshold: threshold))
        }
    }

    /// "0.82 session starts expected in the hour after 11:50: time of day 0.64 × …".
    static func describe(_ prediction: UsageLearner.Prediction, at date: Date, threshold: Double) -> String {
        "\(number(prediction.expectedStarts)) session starts expected in the hour after \(WireCoding.format(date)): "
            + "time of day \(number(prediction.fromTimeOfDay)) × \(number(prediction.activityLift)) (\(prediction.context.activity.label)) "
            + "× \(number(prediction.sinceOpenLift)) (\(prediction.context.sinceOpen.label)); today's threshold \(number(threshold))"
    }

    static func number(_ value: Double) -> String { String(format: "%.2f", value) }
}

extension ReasonCode {
    /// Codes that hold a wake back until the chances change with the time of day: looked at again
    /// after `reviewHeldAppsAfter`.
    var isReviewedLater: Bool {
        switch self {
        case .noLikelyOpen, .dailyBudgetSpent, .stillFresh, .closerToTheOpen, .usuallyNoData: true
        default: false
        }
    }
}
