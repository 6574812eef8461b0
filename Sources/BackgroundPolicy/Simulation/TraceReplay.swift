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
        /// Ours: `UsageModel` + `AdaptiveWakePlanner`.
        case adaptive
    }

    public var usage: UsageModel.Configuration
    public var planner: AdaptiveWakePlanner.Configuration

    public init(usage: UsageModel.Configuration = .init(), planner: AdaptiveWakePlanner.Configuration = .init()) {
        self.usage = usage
        self.planner = planner
    }

    /// Every wake the policy decides, per (user, app).
    public func wakes(for trace: AppOpenTrace, policy: Policy) -> [AppOpenTrace.Key: [Date]] {
        if policy == .adaptive {
            return trace.users.reduce(into: [:]) { wakes, user in wakes.merge(adaptive(user: user, in: trace)) { $1 } }
        }
        var wakes: [AppOpenTrace.Key: [Date]] = [:]
        for (key, opens) in trace.opens {
            guard let span = trace.span(of: key.user) else { continue }
            switch policy {
            case .openOnly: wakes[key] = []
            case .fixed15m: wakes[key] = fixed(every: 15 * 60, over: span)
            case .fixed60m: wakes[key] = fixed(every: 60 * 60, over: span)
            case .oracle: wakes[key] = opens.map { $0.addingTimeInterval(-60) }
            case .adaptive: break  // replayed per user, above: its apps learn from one another
            }
        }
        return wakes
    }

    private func fixed(every seconds: TimeInterval, over span: ClosedRange<Date>) -> [Date] {
        stride(from: span.lowerBound.timeIntervalSince1970 + seconds, through: span.upperBound.timeIntervalSince1970, by: seconds)
            .map(Date.init(timeIntervalSince1970:))
    }

    /// One user's apps together, event by event. Each open teaches the app's usage model and the
    /// user's co-usage model; an open of any app may wake the others likely to follow (the user is
    /// active now); after every event — and at least hourly — each app's planner is asked again.
    /// Both kinds of wake spend the same daily budget.
    private func adaptive(user: String, in trace: AppOpenTrace) -> [AppOpenTrace.Key: [Date]] {
        guard let span = trace.span(of: user) else { return [:] }
        let keys = trace.opens.keys.filter { $0.user == user }.sorted()
        let events = keys.flatMap { key in trace.opens[key]!.map { (at: $0, key: key) } }.sorted { ($0.at, $0.key) < ($1.at, $1.key) }
        let planner = AdaptiveWakePlanner(configuration: self.planner)
        var models = Dictionary(uniqueKeysWithValues: keys.map { ($0, UsageModel(configuration: usage)) })
        var coUsage = CoUsageModel(window: self.planner.freshness)
        var wakes: [AppOpenTrace.Key: [Date]] = [:]
        var lastRefresh: [AppOpenTrace.Key: Date] = [:]
        var planned: [AppOpenTrace.Key: Date] = [:]

        func spent(_ key: AppOpenTrace.Key, now: Date) -> Int {
            (wakes[key] ?? []).reversed().prefix { $0 > now.addingTimeInterval(-86400) }.count
        }
        func replan(_ key: AppOpenTrace.Key, now: Date) {
            planned[key] = planner.plan(
                for: models[key]!, lastRefresh: lastRefresh[key], wakesInLastDay: spent(key, now: now), now: now
            ).first?.at
        }
        func wake(_ key: AppOpenTrace.Key, at date: Date) {
            wakes[key, default: []].append(date)
            lastRefresh[key] = date
        }

        var now = span.lowerBound
        var nextEvent = 0
        var nextLook = now
        while now <= span.upperBound {
            if now >= nextLook {
                for key in keys { replan(key, now: now) }
                nextLook = now.addingTimeInterval(3600)
            }
            let earliestPlan = planned.values.min() ?? .distantFuture
            let open = nextEvent < events.count ? events[nextEvent] : nil
            if let open, open.at <= min(earliestPlan, nextLook) {
                now = max(now, open.at)
                let previous = models[open.key]!.lastOpen
                let isSessionStart = previous.map { open.at.timeIntervalSince($0) > usage.sessionGap.seconds } ?? true
                models[open.key]!.recordOpen(at: open.at)
                coUsage.recordOpen(of: open.key.app, at: open.at, isSessionStart: isSessionStart)
                lastRefresh[open.key] = open.at
                nextEvent += 1
                // The user is active: wake the apps whose sessions tend to follow, if they are stale.
                for key in keys where key != open.key {
                    let stale = lastRefresh[key].map { $0 < now.addingTimeInterval(-self.planner.freshness.seconds) } ?? true
                    guard stale, let chance = coUsage.chanceOfSession(of: key.app), chance >= self.planner.activityThreshold,
                        spent(key, now: now) < planner.dailyBudget(for: models[key]!, now: now)
                    else { continue }
                    wake(key, at: now)
                    replan(key, now: now)
                }
                replan(open.key, now: now)
            } else if earliestPlan <= nextLook, let key = planned.first(where: { $0.value == earliestPlan })?.key {
                let at = max(earliestPlan, now)
                guard at <= span.upperBound else { break }
                now = at
                wake(key, at: at)
                replan(key, now: now.addingTimeInterval(0.001))
            } else {
                now = nextLook
            }
        }
        return wakes
    }
}
