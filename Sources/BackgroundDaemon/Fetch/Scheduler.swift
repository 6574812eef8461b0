import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Logging
import ServiceLifecycle

/// The scheduling loop: snapshot the store, ask the policy, start what is due, sleep until the
/// next due time or until rung (a registration, an interval change, a run that ended).
///
/// Stateless between iterations: the plan is recomputed from the store each time, so a crash
/// loses nothing, and runs missed while bgd was down are caught up on the first iteration.
public struct Scheduler: Service {
    private let store: BackgroundStore
    private let coordinator: RunCoordinator
    private let policy: FetchPolicy
    private let usage: UsageTracker
    private let conditions: ConditionsMonitor
    private let clock: any WallClock
    private let doorbell: Doorbell
    private let activity: ActivityFeed
    private let logger: Logger
    private let metrics: DaemonMetrics?

    public init(
        metrics: DaemonMetrics? = nil, store: BackgroundStore, coordinator: RunCoordinator, policy: FetchPolicy,
        usage: UsageTracker, conditions: ConditionsMonitor, clock: any WallClock,
        doorbell: Doorbell, activity: ActivityFeed, logger: Logger
    ) {
        self.store = store
        self.coordinator = coordinator
        self.policy = policy
        self.usage = usage
        self.conditions = conditions
        self.clock = clock
        self.doorbell = doorbell
        self.activity = activity
        self.logger = logger
        self.metrics = metrics
    }

    public func run() async throws {
        await doorbell.serve("scheduler", on: clock, logger: logger) { try await self.iterate() }
    }

    /// `systemctl --user status bgd` says what bgd waits for (sd_notify `STATUS=`), a datagram
    /// per planning pass and only under systemd.
    private static func tellSystemd(_ plan: FetchPlan, apps: Int, now: Date) {
        guard SystemdNotify.isUnderSystemd else { return }
        let next = plan.decisions.compactMap { decision in decision.dueAt.map { ($0, decision.app) } }.min {
            $0.0 < $1.0
        }
        let wake = next.map { "; next wake \($0.1) in \(max(.zero, $0.0.duration(since: now)).humanDescription)" } ?? ""
        SystemdNotify.send("STATUS=\(apps) apps\(wake)")
    }

    /// Plans once and starts what is due; returns when to look again.
    private func iterate() async throws -> Date? {
        do {
            while true {
                let now = clock.now
                let candidates = try await store.fetchCandidates(
                    answersSince: now.addingTimeInterval(-FetchYield.answerMemory.seconds))
                let outlook = await usage.outlook(now: now)
                let plan = policy.plan(
                    for: candidates, runningCount: candidates.count { $0.isRunning }, usage: outlook,
                    conditions: await conditions.effective, now: now)
                try await store.savePlan(plan.decisions, from: candidates, now: now)
                Self.tellSystemd(plan, apps: candidates.count, now: now)
                let launched = try await start(plan, now: now)
                activity.emit(.planned(launched: launched, nextEvaluation: plan.nextEvaluation))
                // Plan again at once: the apps just started now show as running, with their reasons.
                if launched.isEmpty { return plan.nextEvaluation }
            }
        } catch where Task.isCancelled {
            throw CancellationError()  // bgd is stopping: not a failed pass
        }
        // A failed pass is the service loop's to log and try again, after a pause of time that
        // really passes (a wall-clock retry waited a day for a clock set back a day).
    }

    /// Starts what the plan says is due; returns the apps started. An app unregistered, or a
    /// refresh request cancelled, since the snapshot is passed over: the next pass plans without
    /// it. Before, it failed the whole pass, and every other app due waited 30 s.
    func start(_ plan: FetchPlan, now: Date) async throws -> [AppID] {
        var launched: [AppID] = []
        for start in plan.starts {
            let app = start.app
            do {
                let reasons = plan.decision(for: app)?.reasons ?? []
                if let due = plan.decision(for: app)?.dueAt {
                    metrics?.recordSchedulingLag(now.duration(since: due))
                }
                switch start.work {
                case .fetch:
                    _ = try await coordinator.start(.fetch, for: app, trigger: .scheduled, reasons: reasons)
                case .refreshTask(let identifier):
                    _ = try await coordinator.start(
                        .task(identifier: identifier, kind: .appRefresh), for: app, trigger: .scheduled,
                        reasons: reasons + [DecisionReason(.taskStarted, "app refresh task \(identifier)")])
                }
                launched.append(app)
                if start.servesPredictedOpen { await usage.recordWake(at: now) }
            } catch StoreError.runAlreadyInFlight {
                continue  // started by someone else (bgctl simulate fetch) since the snapshot
            } catch StoreError.appNotFound, StoreError.taskRequestNotFound {
                continue  // gone since the snapshot
            }
        }
        return launched
    }
}
