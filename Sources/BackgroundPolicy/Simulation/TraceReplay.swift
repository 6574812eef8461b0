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
        var wakes: [AppOpenTrace.Key: [Date]] = [:]
        for (key, opens) in trace.opens {
            guard let span = trace.span(of: key.user) else { continue }
            switch policy {
            case .openOnly: wakes[key] = []
            case .fixed15m: wakes[key] = fixed(every: 15 * 60, over: span)
            case .fixed60m: wakes[key] = fixed(every: 60 * 60, over: span)
            case .oracle: wakes[key] = opens.map { $0.addingTimeInterval(-60) }
            case .adaptive: wakes[key] = adaptive(opens: opens, over: span)
            }
        }
        return wakes
    }

    private func fixed(every seconds: TimeInterval, over span: ClosedRange<Date>) -> [Date] {
        stride(from: span.lowerBound.timeIntervalSince1970 + seconds, through: span.upperBound.timeIntervalSince1970, by: seconds)
            .map(Date.init(timeIntervalSince1970:))
    }

    /// One app, event by event: each open teaches the model; after every open and every wake —
    /// and at least hourly — the planner is asked again for the next wake.
    private func adaptive(opens: [Date], over span: ClosedRange<Date>) -> [Date] {
        let planner = AdaptiveWakePlanner(configuration: self.planner)
        var model = UsageModel(configuration: usage)
        var wakes: [Date] = []
        var lastRefresh: Date?
        var nextOpen = 0
        var now = span.lowerBound
        let replanEvery: TimeInterval = 3600
        while now <= span.upperBound {
            let dayAgo = now.addingTimeInterval(-86400)
            let spent = wakes.reversed().prefix { $0 > dayAgo }.count
            let planned = planner.plan(for: model, lastRefresh: lastRefresh, wakesInLastDay: spent, now: now).first?.at
            let replan = now.addingTimeInterval(replanEvery)
            let open = nextOpen < opens.count ? opens[nextOpen] : nil
            // The next thing to happen: an open, the planned wake, or the hourly look.
            if let open, open <= min(planned ?? .distantFuture, replan) {
                model.recordOpen(at: open)
                lastRefresh = open
                nextOpen += 1
                now = max(now, open)
            } else if let planned, planned <= replan {
                let at = max(planned, now)
                guard at <= span.upperBound else { break }
                wakes.append(at)
                lastRefresh = at
                now = at.addingTimeInterval(0.001)
            } else {
                now = replan
            }
        }
        return wakes
    }
}
