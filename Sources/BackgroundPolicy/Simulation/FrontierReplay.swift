import Foundation

/// Replays an app-open trace through a planner at a wake budget, in virtual time, as the daemon
/// would run it: decisions every `step` (on the clock's own minutes, never the trace's logging
/// grid) and a second after each open; only the past is known; the day's wakes stay within
/// `wakesPerOpen` × the opens by the online `WakeBudget`, never by a threshold swept on the
/// trace being scored.
public struct FrontierReplay: Sendable {
    /// How each app's chance of an open is scored.
    public enum Planner: String, CaseIterable, Hashable, Sendable {
        /// The per-user logistic `OpenPredictor`.
        case learned
        /// Baseline: the app's decayed rate of opens in this local hour.
        case hourOfDay = "hour-of-day"
        /// Baseline: wake an hour after each open, and each hour after while the budget allows
        /// (the first wake after an open scores highest).
        case reopen
    }

    public var step: Double
    /// An app refreshed this recently is fresh: no wake.
    public var freshFor: Double
    /// No second wake of an app within this unless it was opened meanwhile (by default the
    /// freshness of the first: measured on the dev trace, 60 minutes beat 80 for every planner).
    public var noRewake: Double
    public var history: OpenHistory.Configuration
    public var predictor: OpenPredictor.Configuration

    public init(
        step: Duration = .seconds(600), freshFor: Duration = .seconds(3600), noRewake: Duration = .seconds(3600),
        history: OpenHistory.Configuration = .init(), predictor: OpenPredictor.Configuration = .init()
    ) {
        self.step = step.seconds
        self.freshFor = freshFor.seconds
        self.noRewake = noRewake.seconds
        self.history = history
        self.predictor = predictor
    }

    static let dormancy = 7.0 * 86400

    public func wakes(for trace: AppOpenTrace, planner: Planner, wakesPerOpen: Double) -> [AppOpenTrace.Key: [Date]] {
        wakes(for: trace, planner: planner, budgets: [wakesPerOpen])[0]
    }

    /// The wakes at each of `budgets` (wakes per open), from one walk through the trace: what
    /// the planner learns and scores does not depend on the budget, only which wakes go does,
    /// so each budget gets exactly the wakes a replay of it alone would (a frontier of six
    /// budgets costs about twice one budget, not six times).
    public func wakes(for trace: AppOpenTrace, planner: Planner, budgets: [Double]) -> [[AppOpenTrace.Key: [Date]]] {
        var result = Array(repeating: [AppOpenTrace.Key: [Date]](), count: budgets.count)
        guard !budgets.isEmpty else { return result }
        for user in trace.users {
            let events = trace.events(of: user).map { (t: $0.at.timeIntervalSince1970, app: $0.app) }
            let perBudget =
                planner == .learned
                ? replayLearned(events, budgets: budgets).wakes
                : replayBaseline(events, planner: planner, budgets: budgets)
            for (index, wakes) in perBudget.enumerated() {
                for (app, times) in wakes {
                    result[index][AppOpenTrace.Key(user: user, app: app)] = times.map(Date.init(timeIntervalSince1970:))
                }
            }
        }
        return result
    }

    /// A moment the learned planner scored, with what came after it in the trace.
    public struct LabelledMoment: Sendable {
        public var user: String
        public var moment: LearnedUsage.ScoredMoment
        /// Whether the app was opened within `freshFor` after the moment: what the model learns
        /// to estimate.
        public var opened: Bool
    }

    /// The learned planner's wakes at `wakesPerOpen`; every moment its model scored and learned
    /// from, labelled from the trace, goes to `each`, one user at a time (users in name order,
    /// moments in time order), so a trace of many users is never held whole.
    public func learnedMoments(
        for trace: AppOpenTrace, wakesPerOpen: Double, each: ([LabelledMoment]) throws -> Void
    ) rethrows -> [AppOpenTrace.Key: [Date]] {
        var result: [AppOpenTrace.Key: [Date]] = [:]
        for user in trace.users {
            let events = trace.events(of: user).map { (t: $0.at.timeIntervalSince1970, app: $0.app) }
            let replayed = replayLearned(events, budgets: [wakesPerOpen], keepingMoments: true)
            for (app, times) in replayed.wakes[0] {
                result[AppOpenTrace.Key(user: user, app: app)] = times.map(Date.init(timeIntervalSince1970:))
            }
            try each(
                replayed.moments.map { moment in
                    // Opened in (moment, moment + freshFor]: the last open by the horizon's end is
                    // after the moment (an open at the moment is the one that made it).
                    let opens = trace.opens[AppOpenTrace.Key(user: user, app: moment.app)] ?? []
                    let last = opens.last(notAfter: Date(timeIntervalSince1970: moment.at + freshFor))
                    let opened = last.map { $0.timeIntervalSince1970 > moment.at } ?? false
                    return LabelledMoment(user: user, moment: moment, opened: opened)
                })
        }
        return result
    }

    /// The learned planner exactly as the daemon runs it: `LearnedUsage` learns from the moments
    /// between opens when the next open arrives, and each decision asks it whether to wake —
    /// once per app per moment, whatever the number of budgets. With `keepingMoments`, every
    /// moment the model scored too.
    private func replayLearned(
        _ events: [(t: Double, app: String)], budgets: [Double], keepingMoments: Bool = false
    ) -> (wakes: [[String: [Double]]], moments: [LearnedUsage.ScoredMoment]) {
        var usage = LearnedUsage(
            configuration: learnedConfiguration(wakesPerOpen: budgets[0]), alsoAt: Array(budgets.dropFirst()))
        usage.keepsScoredMoments = keepingMoments
        var wakes = Array(repeating: [String: [Double]](), count: budgets.count)
        walk(events) { t, app in
            usage.recordOpen(of: app, at: t)
        } decide: { t in
            usage.adjust(at: t)
            let apps = usage.history.appsByName
            var estimates = [OpenPredictor.Estimate?](repeating: nil, count: apps.count)
            for budget in budgets.indices {
                var due: [(app: String, score: Double)] = []
                for (index, app) in apps.enumerated()
                where usage.staleness(of: app, at: t, lastWake: wakes[budget][app]?.last) == nil {
                    if estimates[index] == nil { estimates[index] = usage.estimate(of: app, at: t) }
                    guard let estimate = estimates[index] else { continue }
                    if case .success = usage.wake(at: t, estimate: estimate, budget: usage.budgets[budget]) {
                        due.append((app, estimate.probability))
                    }
                }
                for candidate in due.sorted(by: { ($0.score, $1.app) > ($1.score, $0.app) })
                where usage.budgets[budget].allows(candidate.score, at: t) {
                    usage.recordWake(at: t, budget: budget)
                    wakes[budget][candidate.app, default: []].append(t)
                }
            }
        }
        return (wakes, usage.scoredMoments)
    }

    /// The configuration of `LearnedUsage` this replay's settings describe.
    public func learnedConfiguration(wakesPerOpen: Double) -> LearnedUsage.Configuration {
        LearnedUsage.Configuration(
            history: history, predictor: predictor, wakesPerOpen: wakesPerOpen, step: .seconds(step),
            freshFor: .seconds(freshFor), noRewake: .seconds(noRewake),
            initialThreshold: Self.initialThreshold(.learned), dormancy: .seconds(Self.dormancy))
    }

    private func replayBaseline(
        _ events: [(t: Double, app: String)], planner: Planner, budgets wakesPerOpen: [Double]
    ) -> [[String: [Double]]] {
        var history = OpenHistory(configuration: history)
        var budgets = wakesPerOpen.map {
            WakeBudget(wakesPerOpen: $0, initialThreshold: Self.initialThreshold(planner), rewake: .seconds(noRewake))
        }
        var wakes = Array(repeating: [String: [Double]](), count: budgets.count)
        walk(events) { t, app in
            history.recordOpen(of: app, at: t)
            for budget in budgets.indices { budgets[budget].recordOpen(at: t) }
        } decide: { t in
            // Each stale app's rate at this hour, read once for every budget.
            let stale = history.appsByName.compactMap { app -> (app: String, lastOpen: Double, rate: Double)? in
                guard let lastOpen = history.opens[app]?.last, t - lastOpen >= freshFor else { return nil }
                return (app, lastOpen, planner == .reopen ? 0 : history.dayRate(of: app, at: t, length: freshFor))
            }
            for budget in budgets.indices {
                budgets[budget].adjust(at: t)
                var scored: [(app: String, score: Double)] = []
                for (app, lastOpen, rate) in stale {
                    let score: Double
                    switch planner {
                    case .hourOfDay, .learned: score = rate
                    case .reopen:
                        let since = (wakes[budget][app] ?? []).reversed().prefix { $0 > lastOpen }.count
                        score = 1 / Double(1 + since)
                    }
                    budgets[budget].consider(app, score: score, at: t, lastOpen: lastOpen)
                    if let woke = wakes[budget][app]?.last, woke > lastOpen, t - woke < noRewake { continue }
                    scored.append((app, score))
                }
                for candidate in scored.sorted(by: { ($0.score, $1.app) > ($1.score, $0.app) })
                where budgets[budget].allows(candidate.score, at: t) {
                    budgets[budget].spend(at: t)
                    wakes[budget][candidate.app, default: []].append(t)
                }
            }
        }
        return wakes
    }

    /// Walks a user's opens in time order with decisions on the clock's grid between them and a
    /// second after each open; a user away for longer than `dormancy` is skipped ahead.
    private func walk(
        _ events: [(t: Double, app: String)], open: (Double, String) -> Void, decide: (Double) -> Void
    ) {
        guard let first = events.first else { return }
        var index = 0
        var next = (first.t / step).rounded(.down) * step + step
        var lastOpen = first.t
        while index < events.count {
            let at = events[index].t
            if next < at, next - lastOpen > Self.dormancy, at - next > step {
                next = ((at - step) / step).rounded(.down) * step + step  // away: skip to the next open
            }
            if next < at {
                decide(next)
                next += step
                continue
            }
            while index < events.count, events[index].t == at {
                open(at, events[index].app)
                index += 1
            }
            lastOpen = at
            if at + 1 < next { decide(at + 1) }
        }
    }

    static func initialThreshold(_ planner: Planner) -> Double {
        switch planner {
        case .learned: 0.3
        case .hourOfDay: 0.3
        case .reopen: 0.5
        }
    }
}
