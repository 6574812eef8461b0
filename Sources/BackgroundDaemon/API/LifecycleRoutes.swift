import BackgroundModel
import Foundation
import Hummingbird

/// An app's lifecycle, its finite-length background tasks and its `BGTaskScheduler` requests
/// (under `/v1/app`), and the operator's view and debugger commands (`bgctl tasks`).
struct LifecycleRoutes {
    let lifecycle: LifecycleSupervisor
    let tasks: TaskRequests

    func add(to router: Router<APIRequestContext>, appGroup app: RouterGroup<APIRequestContext>) {
        app.post("state") { request, context in
            var request = request
            let bearer = try context.appCaller()
            let report = try await request.decodeJSON(LifecycleReport.self)
            guard report.state != .suspended else {
                throw APIError(
                    .badRequest, .invalidState, "an app reports active, inactive or background; only bgd suspends")
            }
            try await Self.checkOwnProcess(report.processID, context: context)
            return try JSONResponse.make(await lifecycle.report(report, from: bearer.app, launched: bearer.isLaunched))
        }
        app.post("background-tasks") { request, context in
            var request = request
            let bearer = try context.appCaller()
            let begin = try await request.decodeJSON(BeginBackgroundTaskRequest.self)
            if let problem = begin.problem { throw APIError(.badRequest, .invalidTaskName, problem) }
            if let id = begin.id, id.rawValue <= 0 {
                throw APIError(.badRequest, .invalidTaskID, "a background task identifier is a positive integer")
            }
            let caller = await PeerCredentials.of(context.channel)?.processID
            switch await lifecycle.beginTask(
                named: begin.name, for: bearer.app, launched: bearer.isLaunched, id: begin.id, caller: caller)
            {
            case .success(let grant): return try JSONResponse.make(grant, status: .created)
            case .failure(.timeOver(let refusal)): throw ServiceError.backgroundTimeExpired(refusal.reason.detail)
            case .failure(.tooMany): throw ServiceError.tooManyBackgroundTasks(bearer.app)
            }
        }
        app.delete("background-tasks/:task") { _, context in
            let bearer = try context.appCaller()
            guard let raw = context.parameters.get("task"), let number = Int(raw), number > 0 else {
                throw APIError(.badRequest, .invalidTaskID, "a background task identifier is a positive integer")
            }
            guard await lifecycle.endTask(BackgroundTaskIdentifier(rawValue: number), for: bearer.app) else {
                throw ServiceError.unknownBackgroundTask(number)
            }
            return Response(status: .noContent)
        }
        app.post("task-requests") { request, context in
            var request = request
            let bearer = try context.appCaller()
            let task = try await request.decodeJSON(TaskRequest.self)
            try Self.requireValid(taskIdentifier: task.identifier)
            return try JSONResponse.make(try await tasks.submit(task, for: bearer.app), status: .created)
        }
        app.get("task-requests") { _, context in
            try JSONResponse.make(try await tasks.pending(of: try context.appCaller().app))
        }
        app.delete("task-requests") { _, context in
            try await tasks.cancel(of: try context.appCaller().app, identifier: nil)
            return Response(status: .noContent)
        }
        // As `BGTaskScheduler.cancel(taskRequestWithIdentifier:)`: silent when nothing is pending
        // under that identifier; an identifier no request can have is the caller's mistake.
        app.delete("task-requests/:identifier") { _, context in
            let identifier = context.parameters.get("identifier") ?? ""
            try Self.requireValid(taskIdentifier: identifier)
            try await tasks.cancel(of: try context.appCaller().app, identifier: identifier)
            return Response(status: .noContent)
        }

        // The operator: what is pending and running, and Apple's private debugger commands made public.
        router.get("v1/tasks") { _, _ in try JSONResponse.make(try await tasks.overview()) }
        router.post("v1/tasks/run") { request, _ in
            var request = request
            let target = try await request.decodeJSON(TaskTarget.self)
            return try JSONResponse.make(try await tasks.runNow(target), status: .created)
        }
        router.post("v1/tasks/expire") { request, _ in
            var request = request
            let target = try await request.decodeJSON(TaskTarget.self)
            return try JSONResponse.make(try await tasks.expire(target), status: .accepted)
        }
    }

    /// The pid is the kernel's word, not the app's: the caller itself, or a process it started.
    private static func requireValid(taskIdentifier identifier: String) throws {
        guard TaskRequest.isValidIdentifier(identifier) else {
            throw APIError(
                .badRequest, .invalidTaskIdentifier, "a task identifier is 1 to 200 letters, digits, '.', '-' or '_'")
        }
    }

    private static func checkOwnProcess(_ processID: Int32, context: APIRequestContext) async throws {
        guard let peer = await PeerCredentials.of(context.channel) else {
            #if os(Linux)
                // The kernel always says on Linux, but for a caller in a pid namespace bgd cannot
                // see into (pid 0: a container, Flatpak): its pid would be taken on its word, and
                // any process of the user adopted, frozen or ended. Refused, as on a wrong pid.
                throw APIError(
                    .forbidden, .notYourProcess,
                    "bgd cannot tell which process is calling (it runs in a pid namespace bgd cannot see into); "
                        + "report the app's state from bgd's pid namespace")
            #else
                return  // no peer credentials here: the report is taken as it comes
            #endif
        }
        guard processID != peer.processID, ProcessTree.ancestor(of: processID, among: [peer.processID]) == nil
        else { return }
        throw APIError(
            .forbidden, .notYourProcess,
            "process \(processID) is not the caller (\(peer.processID)) nor one it started; an app reports its own pid")
    }
}
