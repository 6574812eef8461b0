import BackgroundModel
import Foundation
import Synchronization

/// iOS 13's `BGTaskScheduler`, for this app: register a launch handler per identifier, submit
/// requests, and bgd runs them — refresh tasks at wakes the adaptive fetch policy plans,
/// processing tasks when the device is quiet.
///
/// ```swift
/// let scheduler = app.taskScheduler
/// scheduler.register(forTaskWithIdentifier: "com.example.feed.refresh") { task in
///     task.expirationHandler = { feed.cancel() }
///     task.setTaskCompleted(success: await feed.refresh())
/// }
/// try await scheduler.submit(AppRefreshTaskRequest(identifier: "com.example.feed.refresh", earliestBeginDate: .now + 900))
/// ```
///
/// Identifiers must be declared when the app is registered (`bgctl register … --task-identifier ID`),
/// like `BGTaskSchedulerPermittedIdentifiers`; `submit` throws `TaskSchedulerError`
/// (`notPermitted`, `tooManyPendingTaskRequests`, `unavailable`) as the real one does.
public struct BGTaskScheduler: Sendable {
    let application: BackgroundApplication

    /// Registers the handler for `identifier`; false when one is registered already.
    @discardableResult
    public func register(forTaskWithIdentifier identifier: String, launchHandler: @escaping TaskLaunchHandler) -> Bool {
        application.state.withLock { state in
            guard state.taskHandlers[identifier] == nil else { return false }
            state.taskHandlers[identifier] = launchHandler
            return true
        }
    }

    /// Submits a request; one with the identifier of a pending request replaces it.
    public func submit(_ request: some BackgroundTaskRequest) async throws {
        do {
            try await application.client.send(.post, "/v1/app/task-requests", body: request.taskRequest)
        } catch let error as BackgroundError {
            if let code = error.apiCode, let known = TaskSchedulerError(rawValue: code) { throw known }
            throw error
        }
    }

    public func cancel(taskRequestWithIdentifier identifier: String) async {
        try? await application.client.send(.delete, "/v1/app/task-requests/\(identifier)")
    }

    public func cancelAllTaskRequests() async {
        try? await application.client.send(.delete, "/v1/app/task-requests")
    }

    /// The app's requests that have not started yet.
    public func pendingTaskRequests() async throws -> [TaskRequest] {
        try await application.client.send(.get, "/v1/app/task-requests", as: [PendingTaskRequest].self).map(\.request)
    }
}

public typealias TaskLaunchHandler = @Sendable (BGTask) async -> Void

/// A request `BGTaskScheduler.submit` takes.
public protocol BackgroundTaskRequest: Sendable {
    var taskRequest: TaskRequest { get }
}

/// `BGAppRefreshTaskRequest`: a short refresh, no earlier than `earliestBeginDate`.
public struct AppRefreshTaskRequest: BackgroundTaskRequest {
    public var identifier: String
    public var earliestBeginDate: Date?

    public init(identifier: String, earliestBeginDate: Date? = nil) {
        self.identifier = identifier
        self.earliestBeginDate = earliestBeginDate
    }

    public var taskRequest: TaskRequest {
        TaskRequest(identifier: identifier, kind: .appRefresh, earliestBeginDate: earliestBeginDate)
    }
}

/// `BGProcessingTaskRequest`: minutes of work while the device is idle, with the network and
/// power it asks for.
public struct ProcessingTaskRequest: BackgroundTaskRequest {
    public var identifier: String
    public var earliestBeginDate: Date?
    public var requiresNetworkConnectivity: Bool
    public var requiresExternalPower: Bool

    public init(
        identifier: String, earliestBeginDate: Date? = nil, requiresNetworkConnectivity: Bool = false,
        requiresExternalPower: Bool = false
    ) {
        self.identifier = identifier
        self.earliestBeginDate = earliestBeginDate
        self.requiresNetworkConnectivity = requiresNetworkConnectivity
        self.requiresExternalPower = requiresExternalPower
    }

    public var taskRequest: TaskRequest {
        TaskRequest(
            identifier: identifier, kind: .processing, earliestBeginDate: earliestBeginDate,
            requiresNetworkConnectivity: requiresNetworkConnectivity, requiresExternalPower: requiresExternalPower)
    }
}

/// A task being carried out (`BGTask`): set `expirationHandler`, and call
/// `setTaskCompleted(success:)` when done — the task runs until then or until it expires.
public final class BGTask: Sendable {
    public let identifier: String
    public let kind: TaskKind

    private struct State {
        var expirationHandler: (@Sendable () -> Void)?
        /// bgd said the time is up: a handler set after that runs at once.
        var expired = false
        var success: Bool?
        var waiter: CheckedContinuation<Bool?, Never>?
    }
    private let state = Mutex(State())

    init(identifier: String, kind: TaskKind) {
        self.identifier = identifier
        self.kind = kind
    }

    /// Runs when the task's time is about to end (or its conditions stopped holding) — at once
    /// when set after that: the launch handler runs in a task of its own, and bgd's word can
    /// come before it sets this. Before, such a handler never ran, no answer came, and the
    /// task ran on to its deadline.
    public var expirationHandler: (@Sendable () -> Void)? {
        get { state.withLock { $0.expirationHandler } }
        set {
            let expired = state.withLock { state in
                state.expirationHandler = newValue
                return state.expired
            }
            if expired { newValue?() }
        }
    }

    /// The work is done; the first call counts.
    public func setTaskCompleted(success: Bool) {
        let waiter = state.withLock { state -> CheckedContinuation<Bool?, Never>? in
            guard state.success == nil else { return nil }
            state.success = success
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: success)
    }

    func expire() {
        let handler = state.withLock { state in
            state.expired = true
            return state.expirationHandler
        }
        handler?()
    }

    /// Waits for `setTaskCompleted`; nil when cancelled first (expired without an answer).
    func completion() async -> Bool? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let known = state.withLock { state -> Bool?? in
                    if let success = state.success { return .some(success) }
                    if Task.isCancelled { return .some(nil) }
                    state.waiter = continuation
                    return .none
                }
                if let known { continuation.resume(returning: known) }
            }
        } onCancel: {
            state.withLock { $0.waiter.take() }?.resume(returning: nil)
        }
    }
}

extension BackgroundApplication {
    /// This app's `BGTaskScheduler`.
    public var taskScheduler: BGTaskScheduler { BGTaskScheduler(application: self) }

    /// Runs the registered handler for `task` and waits for its completion.
    func invokeTaskHandler(_ task: BGTask) async -> BackgroundFetchResult? {
        guard let handler = state.withLock({ $0.taskHandlers[task.identifier] }) else {
            // Nothing registered for it: say so at once, and where the app's developer looks.
            FileHandle.standardError.write(
                Data(
                    "Background: no handler for task \(task.identifier); register(forTaskWithIdentifier:using:) at launch, before run()\n"
                        .utf8))
            return .failed
        }
        let work = Task { await handler(task) }
        let success = await withTaskCancellationHandler {
            await task.completion()
        } onCancel: {
            work.cancel()
        }
        guard let success else { return nil }
        return success ? .newData : .failed
    }
}
