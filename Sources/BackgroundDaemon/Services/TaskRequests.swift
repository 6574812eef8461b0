import BackgroundModel
import BackgroundStore
import Foundation

/// `BGTaskScheduler` requests: an app's submissions and cancellations, the operator's view of
/// what is pending and running, and Apple's private debugger commands made public
/// (`bgctl tasks run`, `bgctl tasks expire`). A change here rings the task dispatcher and the
/// scheduler (a refresh request moves the app's next wake).
struct TaskRequests: Sendable {
    let store: BackgroundStore
    let apps: Apps
    let coordinator: RunCoordinator
    let lifecycle: LifecycleSupervisor
    let dispatcher: TaskDispatcher
    let clock: any WallClock
    let taskDoorbell: Doorbell
    let schedulerDoorbell: Doorbell

    /// Submits (or replaces) a request; answers what the app now has pending.
    func submit(_ task: TaskRequest, for app: AppID) async throws -> [PendingTaskRequest] {
        try await store.submitTaskRequest(task, for: app, now: clock.now)
        taskDoorbell.ring()
        schedulerDoorbell.ring()
        return try await store.pendingTaskRequests(of: app)
    }

    func pending(of app: AppID) async throws -> [PendingTaskRequest] {
        try await store.pendingTaskRequests(of: app)
    }

    /// Cancels one request, or all of the app's with a nil identifier.
    func cancel(of app: AppID, identifier: String?) async throws {
        _ = try await store.cancelTaskRequests(of: app, identifier: identifier)
        schedulerDoorbell.ring()
    }

    /// What `bgctl tasks` shows.
    func overview() async throws -> TasksOverview {
        let running = try await store.runningTasks()
        return TasksOverview(
            pending: await dispatcher.explain(try await store.pendingTaskRequests(), running: running),
            running: running, lifecycles: await lifecycle.statuses(), now: clock.now)
    }

    /// `_simulateLaunchForTaskWithIdentifier`: the pending request runs now, whatever its conditions.
    func runNow(_ target: TaskTarget) async throws -> RunRecord {
        _ = try await apps.require(target.app)
        guard
            let pending = try await store.pendingTaskRequests(of: target.app).first(where: {
                $0.request.identifier == target.identifier
            })
        else { throw StoreError.taskRequestNotFound(target.app, target.identifier) }
        return try await coordinator.start(
            .task(identifier: target.identifier, kind: pending.request.kind, submittedAt: pending.submittedAt),
            for: target.app, trigger: .manual,
            reasons: [
                DecisionReason(
                    .manualTaskLaunch, "requested with bgctl tasks run (_simulateLaunchForTaskWithIdentifier)")
            ])
    }

    /// `_simulateExpirationForTaskWithIdentifier`: the running task's expiration handler runs now.
    func expire(_ target: TaskTarget) async throws -> RunningTask {
        guard
            let task = try await store.runningTasks().first(where: {
                $0.app == target.app && $0.identifier == target.identifier
            })
        else { throw ServiceError.taskNotRunning(target.app, identifier: target.identifier) }
        _ = await coordinator.expireEarly(task.run.id)
        return task
    }
}
