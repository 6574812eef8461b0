import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Logging
import ServiceLifecycle

/// Starts `BGProcessingTaskRequest`s when `ProcessingTaskPolicy` allows — their date has come,
/// the network and power they ask for are there, no app is in the foreground — and stops a
/// running one (expiration handler, then the end) as soon as that stops holding. App refresh
/// requests are started by the scheduler, through the adaptive fetch policy.
actor TaskDispatcher: Service {
    private let store: BackgroundStore
    private let coordinator: RunCoordinator
    private let lifecycle: LifecycleSupervisor
    private let conditions: ConditionsMonitor
    private let policy: ProcessingTaskPolicy
    private let clock: any WallClock
    private let doorbell: Doorbell
    private let logger: Logger
    /// Running processing tasks already asked to stop.
    private var stopping: Set<RunID> = []
    /// What each processing task started here asked for (the request leaves the store when its
    /// run starts). After a restart of bgd a task's run is over anyway.
    private var started: [RunID: TaskRequest] = [:]

    init(
        store: BackgroundStore, coordinator: RunCoordinator, lifecycle: LifecycleSupervisor,
        conditions: ConditionsMonitor,
        policy: ProcessingTaskPolicy, clock: any WallClock, doorbell: Doorbell, logger: Logger
    ) {
        self.store = store
        self.coordinator = coordinator
        self.lifecycle = lifecycle
        self.conditions = conditions
        self.policy = policy
        self.clock = clock
        self.doorbell = doorbell
        self.logger = logger
    }

    func run() async throws {
        await doorbell.serve("tasks", on: clock, logger: logger) { try await self.dispatch() }
    }

    /// Why each pending request waits, for `bgctl tasks`.
    func explain(_ pending: [PendingTaskRequest], running: [RunningTask]) async -> [PendingTaskRequest] {
        let now = clock.now
        let effective = await conditions.effective
        let foreground = await lifecycle.appInForeground
        // Oldest first, as they start: the free slots go to the first whose conditions hold.
        var slots = policy.freeSlots(among: running)
        return pending.map { item in
            var item = item
            let reason = policy.waitingReason(
                for: item.request, conditions: effective, appInForeground: foreground, now: now)
            switch (item.request.kind, reason) {
            case (.appRefresh, nil):
                item.waitingReason = DecisionReason(
                    .taskStarted, "goes with the app's next wake planned by the fetch policy (bgctl why)")
            case (.processing, nil) where slots == 0:
                item.waitingReason = policy.slotReason
            case (.processing, nil):
                slots -= 1
            default:
                item.waitingReason = reason
            }
            return item
        }
    }

    private func dispatch() async throws -> Date? {
        do {
            let now = clock.now
            let effective = await conditions.effective
            let foreground = await lifecycle.appInForeground
            // One started with `bgctl tasks run` runs whatever its conditions, as it started: a
            // developer trying it has the app in the foreground. Before, the next pass stopped it.
            for task in try await store.runningTasks()
            where task.kind == .processing && task.run.trigger != .manual && !stopping.contains(task.run.id) {
                let request = started[task.run.id] ?? TaskRequest(identifier: task.identifier, kind: .processing)
                if let reason = policy.stopReason(for: request, conditions: effective, appInForeground: foreground),
                    await coordinator.expireEarly(task.run.id)
                {
                    stopping.insert(task.run.id)
                    logger.info(
                        "Stopping a processing task",
                        metadata: ["app.id": "\(task.app)", "task": "\(task.identifier)", "reason": "\(reason)"])
                }
            }
            let runningTasks = try await store.runningTasks()
            let running = Set(runningTasks.map(\.run.id))
            stopping.formIntersection(running)
            started = started.filter { running.contains($0.key) }
            let pending = try await store.pendingTaskRequests().filter { $0.request.kind == .processing }
            try await start(
                pending.filter {
                    policy.waitingReason(for: $0.request, conditions: effective, appInForeground: foreground, now: now)
                        == nil
                },
                slots: policy.freeSlots(among: runningTasks))
            return policy.nextCheck(for: pending.map(\.request), now: now)
        } catch where Task.isCancelled {
            // bgd is stopping (a SIGTERM, another listener that failed): the loop ends quietly,
            // not with a warning that would read as a second fault. Any other failure is the
            // loop's to log and try again after a pause of time that really passes.
            throw CancellationError()
        }
    }

    /// Starts the processing tasks whose conditions hold, oldest first, as many as `slots`
    /// allow (the coordinator rings again when a run ends). One whose app was unregistered, or
    /// that was cancelled or submitted anew, since they were read is passed over. Before, it
    /// failed the whole pass, and every other task due waited 30 s.
    func start(_ due: [PendingTaskRequest], slots: Int) async throws {
        var slots = slots
        for item in due where slots > 0 {
            do {
                let run = try await coordinator.start(
                    .task(identifier: item.request.identifier, kind: .processing, submittedAt: item.submittedAt),
                    for: item.app,
                    trigger: .scheduled,
                    reasons: [
                        DecisionReason(
                            .taskStarted,
                            "processing task \(item.request.identifier): its conditions hold and no app is in the foreground"
                        )
                    ])
                started[run.id] = item.request
                slots -= 1
            } catch StoreError.runAlreadyInFlight {
                continue  // the app is busy; again when its run ends (the coordinator rings us)
            } catch StoreError.appNotFound, StoreError.taskRequestNotFound {
                continue  // gone since they were read
            }
        }
    }
}
