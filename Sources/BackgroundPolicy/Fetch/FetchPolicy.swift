import BackgroundModel
import Foundation

/// Decides when each app is next woken for a background fetch. Pure: no I/O, no clock, no logging.
///
/// The interval decision, deliberately plain so that it is easy to predict:
/// due = last run's start + max(app interval, system floor) × stretch, where the stretch doubles
/// for each consecutive run that failed (`.failed`, crashed, could not launch) or overran its
/// budget, up to `maximumStretch` — the app is woken less often, as iOS does. A run cut short by
/// bgd itself is made up at once. That is the earliest a wake may come; `plan` then lets the
/// usage outlook, the per-hour yield and the machine's conditions delay or hold it, and coalesces
/// wakes across apps. The Scheduler calls `plan`; `bgctl why` shows what it decided.
public struct FetchPolicy: Sendable {
    public struct Configuration: Hashable, Sendable {
        /// No app is woken more often than this, whatever it asks (`.minimum` means this).
        public var systemFloor: Duration
        /// At most this many fetch runs in flight at once.
        public var maximumConcurrentRuns: Int
        /// The largest factor failures or overruns stretch an interval by.
        public var maximumStretch: Int
        /// However long the stretch, a wake comes at least this often while the app's interval allows.
        public var maximumDelay: Duration
        /// With a usage outlook, an app never opened is woken at most this often (nil: on its
        /// interval). Android's "rare" bucket: unused apps get almost nothing.
        public var unusedAppInterval: Duration?
        /// When to look again at an app held back until the chances change with the time of day.
        public var reviewHeldAppsAfter: Duration
        /// Wakes of different apps due within this of the earliest share one wake-up (zero: never).
        public var coalescingLeeway: Duration
        /// On a discharging battery at or below this percentage, no app is woken.
        public var lowBatteryLevel: Int
        /// How the share of fetches bringing new data is learnt per hour of day.
        public var fetchYield: FetchYield.Configuration

        public init(
            systemFloor: Duration = .seconds(15 * 60), maximumConcurrentRuns: Int = 4, maximumStretch: Int = 32,
            maximumDelay: Duration = .seconds(24 * 3600), unusedAppInterval: Duration? = nil,
            reviewHeldAppsAfter: Duration = .seconds(3600), coalescingLeeway: Duration = .seconds(300),
            lowBatteryLevel: Int = 20, fetchYield: FetchYield.Configuration = .init()
        ) {
            self.coalescingLeeway = max(.zero, coalescingLeeway)
            self.lowBatteryLevel = lowBatteryLevel
            self.fetchYield = fetchYield
            self.unusedAppInterval = unusedAppInterval
            self.reviewHeldAppsAfter = reviewHeldAppsAfter
            self.systemFloor = systemFloor
            self.maximumConcurrentRuns = max(1, maximumConcurrentRuns)
            self.maximumStretch = max(1, maximumStretch)
            self.maximumDelay = maximumDelay
        }
    }

    public var configuration: Configuration

    public init(configuration: Configuration = .init()) { self.configuration = configuration }

    /// Plans every candidate at `now`; `runningCount` runs are already in flight. With a usage
    /// outlook, apps the user opens are woken before their likely opens (see `UsageOutlook`);
    /// hours that usually bring no data, and the machine's conditions, hold or thin wakes; wakes
    /// of different apps close together share one wake-up of the system.
    public func plan(
        for candidates: [FetchCandidate], runningCount: Int, usage: UsageOutlook? = nil,
        conditions: DeviceConditions = .unconstrained, now: Date
    ) -> FetchPlan {
        var decisions = candidates.map { candidate in
            var decision = dueDecision(for: candidate, now: now)
            if let usage {
                decision = usage.refine(
                    decision, for: candidate, unusedAppInterval: configuration.unusedAppInterval, now: now)
            }
            decision = applyingYield(to: decision, answers: candidate.answers, now: now)
            decision = applyingNotBefore(candidate.notBefore, to: decision)
            return applying(conditions, to: decision)
        }
        coalesce(&decisions, now: now)
        let due = decisions.indices
            .filter { decisions[$0].dueAt.map { $0 <= now } ?? false }
            .sorted { (decisions[$0].dueAt!, decisions[$0].app) < (decisions[$1].dueAt!, decisions[$1].app) }
        let slots = max(0, configuration.maximumConcurrentRuns - runningCount)
        var starts: [FetchPlan.Start] = []
        for (rank, index) in due.enumerated() {
            let overdue = now.duration(since: decisions[index].dueAt!)
            if rank < slots {
                decisions[index].reasons.append(DecisionReason(.due, "due \(overdue.humanDescription) ago"))
                starts.append(start(for: decisions[index], candidates[index], now: now))
            } else {
                decisions[index].reasons.append(
                    DecisionReason(
                        .concurrencyLimit,
                        "\(configuration.maximumConcurrentRuns) runs at most at once; waits for one to end"))
            }
        }
        var future = decisions.compactMap(\.dueAt).filter { $0 > now }
        // Held back until the chances change with the time of day: look again.
        if decisions.contains(where: { $0.dueAt == nil && $0.reasons.contains { $0.code.isReviewedLater } }) {
            future.append(now.adding(configuration.reviewHeldAppsAfter))
        }
        return FetchPlan(starts: starts, decisions: decisions, nextEvaluation: future.min())
    }

    /// What a due wake carries out: the app's refresh task when one is pending and may begin,
    /// else a fetch.
    func start(for decision: WakeDecision, _ candidate: FetchCandidate, now: Date) -> FetchPlan.Start {
        var work = FetchPlan.Start.Work.fetch
        if let task = candidate.pendingRefreshTask, (candidate.notBefore ?? now) <= now {
            work = .refreshTask(identifier: task)
        }
        return FetchPlan.Start(
            app: decision.app, work: work, servesPredictedOpen: decision.reasons.contains { $0.code == .predictedOpen })
    }

    /// One wake-up of the system for wakes close together (iOS's timer tolerance): the earliest
    /// planned wake waits, by at most `coalescingLeeway`, for the latest one due within the
    /// leeway after it, and they start together. Waiting, not waking early, keeps every app's
    /// minimum interval. The window is fixed by the earliest due time, so planning again
    /// within it gives the same answer.
    private func coalesce(_ decisions: inout [WakeDecision], now: Date) {
        let leeway = configuration.coalescingLeeway
        guard leeway > .zero, let earliest = decisions.compactMap(\.dueAt).min() else { return }
        let windowEnd = earliest.adding(leeway)
        let batch = decisions.indices.filter { decisions[$0].dueAt.map { $0 <= windowEnd } ?? false }
        let together = batch.map { decisions[$0].dueAt! }.max()!
        guard batch.count > 1 else { return }
        for index in batch where decisions[index].dueAt! < together {
            let others = Self.someOf(batch.filter { $0 != index }.map { decisions[$0].app.rawValue })
            let own = decisions[index].dueAt!
            decisions[index].reasons.append(
                DecisionReason(
                    .coalesced,
                    "due at \(WireCoding.format(own)); shares one wake-up with \(others) at \(WireCoding.format(together)), \(together.duration(since: own).humanDescription) later"
                ))
            // Already past the shared time: all start now, as they would have.
            if together > now { decisions[index].dueAt = together }
        }
    }

    /// Names a few, and counts the rest: a reason stays a sentence when hundreds of apps share a
    /// wake-up (listing every one made each app's reasons grow with the number of apps, and the
    /// app listing with its square).
    static func someOf(_ apps: [String], naming limit: Int = 3) -> String {
        guard apps.count > limit else { return apps.joined(separator: ", ") }
        return apps.prefix(limit).joined(separator: ", ") + " and \(apps.count - limit) other apps"
    }

    /// A pending `BGAppRefreshTaskRequest`'s earliest begin date holds the wake until then.
    func applyingNotBefore(_ notBefore: Date?, to decision: WakeDecision) -> WakeDecision {
        guard let notBefore, let due = decision.dueAt, due < notBefore else { return decision }
        var decision = decision
        decision.dueAt = notBefore
        decision.reasons.append(
            DecisionReason(
                .taskNotYetDue,
                "the app's refresh task request asks to begin no earlier than \(WireCoding.formatSeconds(notBefore))"))
        return decision
    }

    /// When one app is due, ignoring the others.
    public func dueDecision(for candidate: FetchCandidate, now: Date) -> WakeDecision {
        let app = candidate.app
        if candidate.isRunning {
            return WakeDecision(
                app: app, dueAt: nil, reasons: [DecisionReason(.alreadyRunning, "a fetch is in flight")])
        }
        let interval: Duration
        var reasons: [DecisionReason] = []
        switch candidate.interval {
        case .never:
            return WakeDecision(
                app: app, dueAt: nil,
                reasons: [DecisionReason(.fetchDisabled, "the app's fetch interval is 'never' (the default)")])
        case .minimum:
            interval = configuration.systemFloor
            reasons.append(
                DecisionReason(.systemFloor, "interval 'minimum' is the system floor of \(interval.humanDescription)"))
        case .every(let requested) where requested < configuration.systemFloor:
            interval = configuration.systemFloor
            reasons.append(
                DecisionReason(
                    .systemFloor,
                    "the system floor of \(interval.humanDescription) is longer than the app's \(requested.humanDescription)"
                ))
        case .every(let requested):
            interval = requested
            reasons.append(
                DecisionReason(
                    .minimumInterval, "the app asks for at most one fetch every \(requested.humanDescription)"))
        }

        guard let last = candidate.recentRuns.first else {
            let anchor = clamped(candidate.registeredAt, now: now, reasons: &reasons)
            reasons.insert(DecisionReason(.firstFetch, "never fetched; counting from registration"), at: 0)
            return WakeDecision(
                app: app, dueAt: anchor.map { $0.adding(interval) } ?? now, reasons: reasons, spacing: interval)
        }
        guard let anchor = clamped(last.startedAt, now: now, reasons: &reasons) else {
            return WakeDecision(app: app, dueAt: now, reasons: reasons, spacing: interval)
        }

        let streak = candidate.recentRuns.prefix { $0.outcome == .interrupted }.count
        if streak > 0 && streak < 3 {
            // bgd's own crash is not the app's fault: make the run up at once. Repeated
            // interruptions fall through to backoff, so a run that crashes bgd cannot loop.
            return WakeDecision(
                app: app, dueAt: anchor,
                reasons: [
                    DecisionReason(.interruptedRun, "the last run was cut short when bgd stopped; made up at once")
                ])
        }

        let trouble = candidate.recentRuns.prefix { !$0.outcome.isSuccess }
        let overruns = trouble.filter { $0.outcome == .expired }.count
        // bgd stopping under a run three times running is counted (a run that takes bgd down
        // must not loop), but said as what it is, not as the app's failure.
        let interruptions = trouble.filter { $0.outcome == .interrupted }.count
        let failures = trouble.count - overruns - interruptions
        var stretch = 1
        if !trouble.isEmpty {
            stretch = min(configuration.maximumStretch, 1 << min(trouble.count, 30))
            if failures > 0 {
                reasons.append(
                    DecisionReason(
                        .backoffAfterFailure,
                        "\(failures) recent run(s) failed or crashed; interval stretched ×\(stretch)"))
            }
            if interruptions > 0 {
                reasons.append(
                    DecisionReason(
                        .backoffAfterFailure,
                        "\(interruptions) recent run(s) were cut short by bgd stopping; interval stretched ×\(stretch)")
                )
            }
            if overruns > 0 {
                reasons.append(
                    DecisionReason(
                        .penaltyAfterOverrun,
                        "\(overruns) recent run(s) overran the budget; interval stretched ×\(stretch)"))
            }
        }
        var delay = interval * stretch
        if stretch > 1 { delay = min(delay, max(interval, configuration.maximumDelay)) }
        return WakeDecision(app: app, dueAt: anchor.adding(delay), reasons: reasons, spacing: delay)
    }

    /// A persisted time in the future means the wall clock went backwards, and how long ago it
    /// really was is unknown: nil, and the app is due now — once, as the run it gets is then the
    /// newest and counts from there. Counting from now instead put the app off by its interval
    /// at every pass, and it was not woken until the clock caught up. Under a second ahead is
    /// said nothing of: the store keeps milliseconds, rounded, and NTP slews the clock by less.
    private func clamped(_ date: Date, now: Date, reasons: inout [DecisionReason]) -> Date? {
        guard Self.wasStampedBeforeTheClockWentBack(date, now: now) else { return min(date, now) }
        reasons.append(
            DecisionReason(
                .clockWentBackwards,
                "a recorded time is \(date.duration(since: now).humanDescription) in the future (the clock went back); due now"
            ))
        return nil
    }

    /// Whether `stamp` lies a second or more after `now`: written before the wall clock was set
    /// back (less is the store's millisecond rounding, or NTP's slewing). How long ago it really
    /// was is unknown; whatever counts from it is due now.
    static func wasStampedBeforeTheClockWentBack(_ stamp: Date, now: Date) -> Bool {
        stamp.timeIntervalSince(now) >= 1
    }
}

extension RunOutcome {
    /// Outcomes that end a streak of trouble: an answer other than `.failed`, or a cancellation.
    var isSuccess: Bool {
        switch self {
        case .newData, .noData, .cancelled, .eventsHandled: true
        case .failed, .expired, .crashed, .launchFailed, .interrupted: false
        }
    }
}
