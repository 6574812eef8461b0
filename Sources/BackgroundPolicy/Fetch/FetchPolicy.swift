import BackgroundModel
import Foundation

/// Decides when each app is next woken for a background fetch. Pure: no I/O, no clock, no logging.
///
/// The first policy, deliberately plain so that its decisions are easy to predict:
/// due = last run's start + max(app interval, system floor) × stretch, where the stretch doubles
/// for each consecutive run that failed (`.failed`, crashed, could not launch) or overran its
/// budget, up to `maximumStretch` — the app is woken less often, as iOS does. A run cut short by
/// bgd itself is made up at once. The adaptive, learning policy replaces `dueDecision` later; the
/// seam is `plan(for:runningCount:now:)`, which the Scheduler and `bgctl why` both call.
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
        /// With a usage outlook, when to look again at an app the outlook holds back.
        public var reviewHeldAppsAfter: Duration

        public init(
            systemFloor: Duration = .seconds(15 * 60), maximumConcurrentRuns: Int = 4, maximumStretch: Int = 32,
            maximumDelay: Duration = .seconds(24 * 3600), unusedAppInterval: Duration? = nil,
            reviewHeldAppsAfter: Duration = .seconds(3600)
        ) {
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
    /// outlook, apps the user opens are woken before their likely opens (see `UsageOutlook`).
    public func plan(for candidates: [FetchCandidate], runningCount: Int, usage: UsageOutlook? = nil, now: Date) -> FetchPlan {
        var decisions = candidates.map { candidate in
            let decision = dueDecision(for: candidate, now: now)
            guard let usage else { return decision }
            return usage.refine(decision, for: candidate, unusedAppInterval: configuration.unusedAppInterval, now: now)
        }
        let due = decisions.indices
            .filter { decisions[$0].dueAt.map { $0 <= now } ?? false }
            .sorted { (decisions[$0].dueAt!, decisions[$0].app) < (decisions[$1].dueAt!, decisions[$1].app) }
        let slots = max(0, configuration.maximumConcurrentRuns - runningCount)
        var launch: [AppID] = []
        for (rank, index) in due.enumerated() {
            let overdue = now.duration(since: decisions[index].dueAt!)
            if rank < slots {
                decisions[index].reasons.append(DecisionReason(.due, "due \(overdue.humanDescription) ago"))
                launch.append(decisions[index].app)
            } else {
                decisions[index].reasons.append(
                    DecisionReason(
                        .concurrencyLimit,
                        "\(configuration.maximumConcurrentRuns) runs at most at once; waits for one to end"))
            }
        }
        var future = decisions.compactMap(\.dueAt).filter { $0 > now }
        // Held back by the outlook: the chances change with the time of day, so look again.
        if usage != nil, decisions.contains(where: { $0.dueAt == nil && $0.reasons.contains { $0.code.isUsageHoldback } }) {
            future.append(now.adding(configuration.reviewHeldAppsAfter))
        }
        return FetchPlan(launch: launch, decisions: decisions, nextEvaluation: future.min())
    }

    /// When one app is due, ignoring the others.
    public func dueDecision(for candidate: FetchCandidate, now: Date) -> WakeDecision {
        let app = candidate.app
        if candidate.isRunning {
            return WakeDecision(app: app, dueAt: nil, reasons: [DecisionReason(.alreadyRunning, "a fetch is in flight")])
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
            reasons.append(DecisionReason(.minimumInterval, "the app asks for at most one fetch every \(requested.humanDescription)"))
        }

        guard let last = candidate.recentRuns.first else {
            let anchor = clamped(candidate.registeredAt, now: now, reasons: &reasons)
            reasons.insert(DecisionReason(.firstFetch, "never fetched; counting from registration"), at: 0)
            return WakeDecision(app: app, dueAt: anchor.adding(interval), reasons: reasons)
        }
        let anchor = clamped(last.startedAt, now: now, reasons: &reasons)

        let streak = candidate.recentRuns.prefix { $0.outcome == .interrupted }.count
        if streak > 0 && streak < 3 {
            // bgd's own crash is not the app's fault: make the run up at once. Repeated
            // interruptions fall through to backoff, so a run that crashes bgd cannot loop.
            return WakeDecision(
                app: app, dueAt: anchor,
                reasons: [DecisionReason(.interruptedRun, "the last run was cut short when bgd stopped; made up at once")])
        }

        let trouble = candidate.recentRuns.prefix { !$0.outcome.isSuccess }
        let overruns = trouble.filter { $0.outcome == .expired }.count
        let failures = trouble.count - overruns
        var stretch = 1
        if !trouble.isEmpty {
            stretch = min(configuration.maximumStretch, 1 << min(trouble.count, 30))
            if failures > 0 {
                reasons.append(
                    DecisionReason(
                        .backoffAfterFailure,
                        "\(failures) recent run(s) failed or crashed; interval stretched ×\(stretch)"))
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
        return WakeDecision(app: app, dueAt: anchor.adding(delay), reasons: reasons)
    }

    /// A persisted time in the future means the wall clock went backwards: treat it as now,
    /// so the app is not starved until the clock catches up.
    private func clamped(_ date: Date, now: Date, reasons: inout [DecisionReason]) -> Date {
        guard date > now else { return date }
        reasons.append(
            DecisionReason(
                .clockWentBackwards,
                "a recorded time is \(date.duration(since: now).humanDescription) in the future; counting from now"))
        return now
    }
}

extension RunOutcome {
    /// Outcomes that end a streak of trouble: an answer other than `.failed`, or a cancellation.
    var isSuccess: Bool {
        switch self {
        case .newData, .noData, .cancelled: true
        case .failed, .expired, .crashed, .launchFailed, .interrupted: false
        }
    }
}
