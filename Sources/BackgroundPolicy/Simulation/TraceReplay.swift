import BackgroundModel
import Foundation

/// Replays an app-open trace through a wake policy in virtual time and records every wake.
///
/// The policy learns online: at any simulated instant it has seen only the opens before it.
/// `adaptive` runs the very model and planner the daemon uses.
public struct TraceReplay: Sendable {
    /// A way of deciding wakes.
    public enum Policy: String, CaseIterable, Hashable, Sendable {
        /// No background wakes: content is fetched when the app is opened.
        case openOnly = "open-only"
        /// Every app every 15 minutes.
        case fixed15m = "fixed-15m"
        /// Every app every 60 minutes.
        case fixed60m = "fixed-60m"
        /// Knows the future: one wake a minute before each open. A bound, not a policy.
        case oracle
        /// Ours: `UsageLearner` + `AdaptiveWakePlanner` + `WakeThreshold`, as bgd runs them.
        case adaptive
    }

    public var learning: UsageLearner.Configuration
    public var planner: AdaptiveWakePlanner.Configuration
    /// Where the daily threshold starts before the budget has moved it.
    public var initialThreshold: Double

    public init(
        learning: UsageLearner.Configuration = .init(), planner: AdaptiveWakePlanner.Configuration = .init(),
        initialThreshold: Double = 0.3
    ) {
        self.learning = learning
        self.planner = planner
        self.initialThreshold = initialThreshold
    }

    /// How long a user may be silent before the replay treats them as away.
    static let dormancy = Duration.seconds(7 * 86400)

    /// Every wake the policy decides, per (user, app).
    public func wakes(for trace: AppOpenTrace, policy: Policy) -> [AppOpenTrace.Key: [Date]] {
        if policy == .adaptive {
            return trace.users.reduce(into: [:]) { wakes, user in
                wakes.merge(adaptive(user: user, in: trace).wakes) { $1 }
            }
        }
        var wakes: [AppOpenTrace.Key: [Date]] = [:]
        var present: [String: [ClosedRange<Double>]] = [:]
        for (key, opens) in trace.opens {
            guard let span = trace.span(of: key.user) else { continue }
            let stretches = present[key.user] ?? Self.presence(of: key.user, in: trace)
            present[key.user] = stretches
            switch policy {
            case .openOnly: wakes[key] = []
            case .fixed15m: wakes[key] = fixed(every: 15 * 60, over: span, while: stretches)
            case .fixed60m: wakes[key] = fixed(every: 60 * 60, over: span, while: stretches)
            case .oracle: wakes[key] = opens.map { $0.addingTimeInterval(-60) }
            case .adaptive: break  // replayed per user, above: its apps learn from one another
            }
        }
        return wakes
    }

    /// A timer's wakes over the user's span, but for the stretches the user was away (silent for
    /// over `dormancy`), as the other policies skip them: opens years apart made millions.
    private func fixed(
        every seconds: TimeInterval, over span: ClosedRange<Date>, while present: [ClosedRange<Double>]
    )
        -> [Date]
    {
        let start = span.lowerBound.timeIntervalSince1970
        return present.flatMap { stretch -> [Date] in
            // The timer's own grid (from the span's start), within the stretch.
            let first = start + seconds * max(1, ((stretch.lowerBound - start) / seconds).rounded(.up))
            return stride(from: first, through: stretch.upperBound, by: seconds).map(Date.init(timeIntervalSince1970:))
        }
    }

    /// The stretches the user is around: from each open to the next, or to `dormancy` after it
    /// when the next is further away (or there is none before the span's end).
    static func presence(of user: String, in trace: AppOpenTrace) -> [ClosedRange<Double>] {
        let times = trace.events(of: user).map(\.at.timeIntervalSince1970)
        guard let last = times.last else { return [] }
        var stretches: [ClosedRange<Double>] = []
        for (open, next) in zip(times, times.dropFirst() + [last]) {
            let end = min(next, open + dormancy.seconds)
            if let previous = stretches.last, previous.upperBound >= open {
                stretches[stretches.count - 1] = previous.lowerBound...max(previous.upperBound, end)
            } else {
                stretches.append(open...max(open, end))
            }
        }
        return stretches
    }

    /// One user's apps together, in virtual time. The learner sees each open as it happens; at
    /// every grid step, and a second after each open (the user is active: other apps may follow),
    /// each app is asked the planner's question — wake now? — exactly as the daemon asks it.
    /// The day's threshold adapts so that the wakes spent match the budget the opens earn.
    private func adaptive(user: String, in trace: AppOpenTrace) -> (wakes: [AppOpenTrace.Key: [Date]], decisions: Int) {
        guard let span = trace.span(of: user) else { return ([:], 0) }
        let events = trace.events(of: user)
        let planner = AdaptiveWakePlanner(configuration: self.planner)
        var learner = UsageLearner(configuration: learning)
        var threshold = WakeThreshold(initial: initialThreshold)
        var wakes: [String: [Date]] = [:]
        var lastRefresh: [String: Date] = [:]
        var decisions = 0

        func decide(at now: Date) {
            decisions += 1
            learner.advance(to: now)
            threshold.update(now: now, budgetPerDay: planner.dailyBudget(learner: learner, now: now))
            for app in learner.models.keys.sorted() {
                let recent = (wakes[app] ?? []).reversed().prefix { $0 > now.addingTimeInterval(-86400) }.count
                guard
                    case .success = planner.evaluate(
                        app, at: now, learner: learner, threshold: threshold.value, lastRefresh: lastRefresh[app],
                        wakesInLastDay: recent, now: now)
                else { continue }
                wakes[app, default: []].append(now)
                lastRefresh[app] = now
                threshold.recordWake()
            }
        }

        var index = 0
        var grid = planner.nextGridPoint(after: span.lowerBound)
        var lastOpen = span.lowerBound
        while index < events.count {
            let at = events[index].at
            // A user silent for longer than `dormancy` is away: no open to predict, so no grid
            // step is asked until their next open. The replay's cost follows the opens, not the
            // calendar (two opens years apart cost two, not a million steps).
            if grid < at, grid.timeIntervalSince(lastOpen) > Self.dormancy.seconds,
                at.timeIntervalSince(grid) > planner.configuration.step.seconds
            {
                grid = planner.nextGridPoint(after: at.addingTimeInterval(-planner.configuration.step.seconds))
            }
            if grid < at {
                decide(at: grid)
                grid = planner.nextGridPoint(after: grid)
                continue
            }
            while index < events.count, events[index].at == at {
                learner.recordOpen(of: events[index].app, at: at)
                lastRefresh[events[index].app] = at
                index += 1
            }
            lastOpen = at
            let reaction = at.addingTimeInterval(1)
            if reaction < grid { decide(at: reaction) }
        }
        return (
            Dictionary(uniqueKeysWithValues: wakes.map { (AppOpenTrace.Key(user: user, app: $0.key), $0.value) }),
            decisions
        )
    }

    /// How many planning passes the adaptive replay of `trace` makes: what its cost follows.
    public func adaptiveDecisionCount(for trace: AppOpenTrace) -> Int {
        trace.users.reduce(0) { $0 + adaptive(user: $1, in: trace).decisions }
    }
}
