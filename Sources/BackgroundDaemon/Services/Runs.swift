import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation

/// Runs as the operator sees them — history, one run (waiting for its end), why the next wake is
/// when it is, the wakes ahead — and the one command about them, `bgctl simulate fetch`.
struct Runs: Sendable {
    let store: BackgroundStore
    let apps: Apps
    let coordinator: RunCoordinator
    let usage: UsageTracker
    let conditions: ConditionsMonitor
    let fetchPolicy: FetchPolicy
    let waiter: ActivityWaiter
    let clock: any WallClock

    /// The app's runs, newest first.
    func history(of id: AppID, limit: Int) async throws -> [RunRecord] {
        _ = try await apps.require(id)
        return try await store.runs(of: id, limit: limit)
    }

    /// The run, once it has ended or `timeout` has passed on the daemon's clock.
    func run(_ id: RunID, waitingUpTo timeout: Duration = .zero) async throws -> RunRecord {
        let run = try await waiter.awaitEnd(
            timeout: timeout, read: { try await store.run(id) }, hasEnded: { $0.outcome != nil },
            match: { activity in
                if case .runEnded(let run) = activity, run.id == id { return run }
                return nil
            })
        guard let run else { throw StoreError.runNotFound(id) }
        return run
    }

    /// `bgctl simulate fetch`: a run through exactly the production path, started now (a caller
    /// that waits for its end does so with `run(_:waitingUpTo:)`, which its leaving cancels;
    /// the start is not).
    func simulateFetch(_ id: AppID) async throws -> RunRecord {
        _ = try await apps.require(id)
        return try await coordinator.start(
            .fetch, for: id, trigger: .manual,
            reasons: [DecisionReason(.manualRequest, "requested with bgctl simulate fetch")])
    }

    /// What `bgctl why` shows.
    func why(_ id: AppID) async throws -> WakeExplanation {
        let app = try await apps.require(id)
        let plan = try await store.savedPlan(for: id)
        let runs = try await store.runs(of: id, limit: 10)
        let dayAgo = clock.now.addingTimeInterval(-86400)
        let pushes = try await store.pushes(of: id, limit: 200).filter { push in
            push.pushType == "background"
                && (push.state == .queued || ([.dropped, .replaced].contains(push.state) && push.receivedAt > dayAgo))
        }
        return WakeExplanation(
            app: id, fetchInterval: app.fetchInterval, decidedAt: plan?.decidedAt, nextWake: plan?.decision.dueAt,
            reasons: plan?.decision.reasons ?? [], running: runs.first { $0.isRunning },
            recentRuns: runs.filter { !$0.isRunning }, basedOnRun: plan?.basedOnRun,
            pushes: Array(pushes.prefix(10)).map(PushRecord.init))
    }

    /// The wakes planned over the next `hours` if nothing new happens (`bgctl forecast`). The
    /// first is the scheduler's own decision for the app at this moment — the plan over every
    /// app, with its coalescing, exactly as `why` reports it — and the outlook's later wakes
    /// follow it: the two commands never disagree on the next wake (issue 18).
    func forecast(_ id: AppID, hours: Int) async throws -> WakeForecast {
        _ = try await apps.require(id)
        let now = clock.now
        let planned = try await planNow(now)
        guard let candidate = planned.candidates.first(where: { $0.app == id }) else {
            throw StoreError.appNotFound(id)
        }
        var forecast = planned.outlook.forecast(
            for: candidate, policy: fetchPolicy, conditions: planned.conditions,
            until: now.addingTimeInterval(Double(hours) * 3600), now: now)
        if let decision = planned.plan.decision(for: id) { forecast.begin(with: decision, now: now) }
        return forecast
    }

    /// Sets the app's fetch interval and answers with its next wake as the scheduler now plans
    /// it. The saved plan is the pass before the change until the scheduler's next pass, so an
    /// answer read from it named the old interval's reasons (`fetchDisabled` just after `1`).
    func setFetchInterval(_ interval: FetchInterval, for id: AppID) async throws -> AppSummary {
        var summary = try await apps.setFetchInterval(interval, for: id)
        // The interval is committed: a plan that cannot be read now leaves the answer without its
        // next wake rather than saying the change failed.
        let decision = try? await planNow(clock.now).plan.decision(for: id)
        summary.nextWake = decision?.dueAt
        summary.nextWakeReasons = decision?.reasons ?? []
        return summary
    }

    /// The plan over every app as the scheduler would make it at `now`, and what it read.
    private func planNow(
        _ now: Date
    ) async throws -> (
        candidates: [FetchCandidate], outlook: UsageOutlook, conditions: DeviceConditions, plan: FetchPlan
    ) {
        let candidates = try await store.fetchCandidates(
            answersSince: now.addingTimeInterval(-FetchYield.answerMemory.seconds))
        let outlook = await usage.outlook(now: now)
        let conditions = await self.conditions.effective
        let plan = fetchPolicy.plan(
            for: candidates, runningCount: candidates.count { $0.isRunning }, usage: outlook, conditions: conditions,
            now: now)
        return (candidates, outlook, conditions, plan)
    }

    /// How many wakes each app may have today by the usage outlook (the dashboard's budget
    /// column); an app never opened has none.
    func dailyWakeBudgets(of ids: [AppID]) async -> [AppID: Int] {
        let now = clock.now
        let outlook = await usage.outlook(now: now)
        return ids.reduce(into: [:]) { budgets, id in budgets[id] = outlook.dailyWakeBudget(for: id, now: now) }
    }

    /// When the scheduler next looks at any app.
    func nextEvaluation() async throws -> Date? {
        try await store.appListing().compactMap(\.plan?.decision.dueAt).min()
    }
}

extension WakeForecast {
    /// Makes the scheduler's decision the first wake: none when it holds the app (its reason
    /// becomes the holdback), else a wake at its time, the outlook's later wakes after it.
    mutating func begin(with decision: WakeDecision, now: Date) {
        guard let due = decision.dueAt else {
            wakes = []
            holdback = decision.reasons.last ?? holdback
            return
        }
        let next = max(due, now)
        if let first = wakes.first, first.at == next { return }
        let reason =
            decision.reasons.last { $0.code != .due && $0.code != .concurrencyLimit } ?? decision.reasons.last
            ?? DecisionReason(.minimumInterval, "the app's interval")
        wakes = [Wake(at: next, expectedStarts: 0, reason: reason)] + wakes.filter { $0.at > next }
    }
}
