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
        trace.users.reduce(into: [:]) { wakes, user in
            for (app, times) in replay(user: user, in: trace, planner: planner, wakesPerOpen: wakesPerOpen) {
                wakes[AppOpenTrace.Key(user: user, app: app)] = times.map(Date.init(timeIntervalSince1970:))
            }
        }
    }

    private func replay(
        user: String, in trace: AppOpenTrace, planner: Planner, wakesPerOpen: Double
    ) -> [String: [Double]] {
        let events = trace.events(of: user).map { (t: $0.at.timeIntervalSince1970, app: $0.app) }
        return planner == .learned
            ? replayLearned(events, wakesPerOpen: wakesPerOpen)
            : replayBaseline(events, planner: planner, wakesPerOpen: wakesPerOpen)
    }

    /// The learned planner exactly as the daemon runs it: `LearnedUsage` learns from the moments
    /// between opens when the next open arrives, and each decision asks it whether to wake.
    private func replayLearned(_ events: [(t: Double, app: String)], wakesPerOpen: Double) -> [String: [Double]] {
        var usage = LearnedUsage(configuration: learnedConfiguration(wakesPerOpen: wakesPerOpen))
        var wakes: [String: [Double]] = [:]
        walk(events) { t, app in
            usage.recordOpen(of: app, at: t)
        } decide: { t in
            usage.adjust(at: t)
            var due: [(app: String, score: Double)] = []
            for app in usage.history.appsByName {
                if case .success(let wake) = usage.wake(app, at: t, lastWake: wakes[app]?.last) {
                    due.append((app, wake.estimate.probability))
                }
            }
            for candidate in due.sorted(by: { ($0.score, $1.app) > ($1.score, $0.app) })
            where usage.budget.allows(candidate.score, at: t) {
                usage.recordWake(at: t)
                wakes[candidate.app, default: []].append(t)
            }
        }
        return wakes
    }

    /// The configuration of `LearnedUsage` this replay's settings describe.
    public func learnedConfiguration(wakesPerOpen: Double) -> LearnedUsage.Configuration {
        LearnedUsage.Configuration(
            history: history, predictor: predictor, wakesPerOpen: wakesPerOpen, step: .seconds(step),
            freshFor: .seconds(freshFor), noRewake: .seconds(noRewake),
            initialThreshold: Self.initialThreshold(.learned), dormancy: .seconds(Self.dormancy))
    }

    private func replayBaseline(
        _ events: [(t: Double, app: String)], planner: Planner, wakesPerOpen: Double
    ) -> [String: [Double]] {
        var history = OpenHistory(configuration: history)
        var budget = WakeBudget(
            wakesPerOpen: wakesPerOpen, initialThreshold: Self.initialThreshold(planner), rewake: .seconds(noRewake))
        var wakes: [String: [Double]] = [:]
        walk(events) { t, app in
            history.recordOpen(of: app, at: t)
            budget.recordOpen(at: t)
        } decide: { t in
            budget.adjust(at: t)
            var scored: [(app: String, score: Double)] = []
            for app in history.appsByName {
                guard let lastOpen = history.opens[app]?.last, t - lastOpen >= freshFor else { continue }
                let score: Double
                switch planner {
                case .hourOfDay, .learned: score = history.dayRate(of: app, at: t, length: freshFor)
                case .reopen:
                    let since = (wakes[app] ?? []).reversed().prefix { $0 > lastOpen }.count
                    score = 1 / Double(1 + since)
                }
                budget.consider(app, score: score, at: t, lastOpen: lastOpen)
                if let woke = wakes[app]?.last, woke > lastOpen, t - woke < noRewake { continue }
                scored.append((app, score))
            }
            for candidate in scored.sorted(by: { ($0.score, $1.app) > ($1.score, $0.app) })
            where budget.allows(candidate.score, at: t) {
                budget.spend(at: t)
                wakes[candidate.app, default: []].append(t)
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
