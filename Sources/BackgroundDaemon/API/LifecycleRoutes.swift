import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Hummingbird

/// An app's lifecycle, its finite-length background tasks and its `BGTaskScheduler` requests
/// (authenticated by its token), and the operator's view and debugger commands (`bgctl tasks`).
struct LifecycleRoutes {
    let core: DaemonCore

    func add(to router: Router<APIRequestContext>, appGroup: RouterGroup<APIRequestContext>) {
        let app = appGroup
        app.post("state") { request, context in
            var request = request
            let bearer = try context.appCaller()
            let report = try await request.decodeJSON(LifecycleReport.self)
            guard report.state != .suspended else {
                throw APIError(
                    .badRequest, .invalidState, "an app reports active, inactive or background; only bgd suspends")
            }
            // The pid is the kernel's word, not the app's: the caller itself, or a process it started.
            if let peer = await PeerCredentials.of(context.channel), report.processID != peer.processID,
                ProcessTree.ancestor(of: report.processID, among: [peer.processID]) == nil
            {
                throw APIError(
                    .forbidden, .notYourProcess,
                    "process \(report.processID) is not the caller (\(peer.processID)) nor one it started; an app reports its own pid"
                )
            }
            return try JSONResponse.make(
                await core.lifecycle.report(report, from: bearer.app, launched: bearer.isLaunched))
        }
        app.post("background-tasks") { request, context in
            var request = request
            let bearer = try context.appCaller()
            let begin = try await request.decodeJSON(BeginBackgroundTaskRequest.self)
            switch await core.lifecycle.beginTask(named: begin.name, for: bearer.app, launched: bearer.isLaunched) {
            case .success(let grant): return try JSONResponse.make(grant, status: .created)
            case .failure(let refusal): throw APIError(.conflict, .backgroundTimeExpired, refusal.reason.detail)
            }
        }
        app.delete("background-tasks/:task") { request, context in
            let bearer = try context.appCaller()
            guard let raw = context.parameters.get("task"), let number = Int(raw), number > 0 else {
                throw APIError(.badRequest, .invalidTaskID, "a background task identifier is a positive integer")
            }
            guard await core.lifecycle.endTask(BackgroundTaskIdentifier(rawValue: number), for: bearer.app) else {
                throw APIError(
                    .notFound, .unknownBackgroundTask,
                    "the app holds no background task \(number) (ended already, or never begun)")
            }
            return Response(status: .noContent)
        }
        app.post("task-requests") { request, context in
            var request = request
            let bearer = try context.appCaller()
            let task = try await request.decodeJSON(TaskRequest.self)
            guard TaskRequest.isValidIdentifier(task.identifier) else {
                throw APIError(
                    .badRequest, .invalidTaskIdentifier,
                    "a task identifier is 1 to 200 letters, digits, '.', '-' or '_'")
            }
            try await core.store.submitTaskRequest(task, for: bearer.app, now: core.clock.now)
            core.taskDoorbell.ring()
            core.schedulerDoorbell.ring()  // a refresh request moves the app's next wake
            return try JSONResponse.make(try await core.store.pendingTaskRequests(of: bearer.app), status: .created)
        }
        app.get("task-requests") { request, context in
            let bearer = try context.appCaller()
            return try JSONResponse.make(try await core.store.pendingTaskRequests(of: bearer.app))
        }
        app.delete("task-requests") { request, context in
            let bearer = try context.appCaller()
            try await core.store.cancelTaskRequests(of: bearer.app, identifier: nil)
            core.schedulerDoorbell.ring()
            return Response(status: .noContent)
        }
        app.delete("task-requests/:identifier") { request, context in
            let bearer = try context.appCaller()
            try await core.store.cancelTaskRequests(
                of: bearer.app, identifier: context.parameters.get("identifier") ?? "")
            core.schedulerDoorbell.ring()
            return Response(status: .noContent)
        }

        // The operator: what is pending and running, and Apple's private debugger commands made public.
        router.get("v1/tasks") { _, _ in
            try JSONResponse.make(
                TasksOverview(
                    pending: await core.tasks.explain(try await core.store.pendingTaskRequests()),
                    running: try await core.store.runningTasks(), lifecycles: await core.lifecycle.statuses(),
                    now: core.clock.now))
        }
        router.post("v1/tasks/run") { request, _ in
            var request = request
            let target = try await request.decodeJSON(TaskTarget.self)
            _ = try await core.requireApp(target.app)
            let kind = try await core.store.pendingTaskRequests(of: target.app).first {
                $0.request.identifier == target.identifier
            }?.request.kind
            guard let kind else { throw StoreError.taskRequestNotFound(target.app, target.identifier) }
            let run = try await core.coordinator.startTask(
                for: target.app, identifier: target.identifier, kind: kind, trigger: .manual,
                reasons: [
                    DecisionReason(
                        .manualTaskLaunch, "requested with bgctl tasks run (_simulateLaunchForTaskWithIdentifier)")
                ],
                budget: kind == .processing ? core.processingBudget : nil)
            return try JSONResponse.make(run, status: .created)
        }
        router.post("v1/tasks/expire") { request, _ in
            var request = request
            let target = try await request.decodeJSON(TaskTarget.self)
            guard
                let task = try await core.store.runningTasks().first(where: {
                    $0.app == target.app && $0.identifier == target.identifier
                })
            else {
                throw APIError(
                    .notFound, .taskNotRunning,
                    "\(target.app) is not running task '\(target.identifier)'; `bgctl tasks` shows what runs")
            }
            _ = await core.coordinator.expireEarly(task.run.id)
            return try JSONResponse.make(task, status: .accepted)
        }
    }
}
