import BackgroundModel
import Foundation
import Synchronization

extension BackgroundApplication {
    /// `beginBackgroundTask(withName:expirationHandler:)`: asks bgd for time to finish work after
    /// leaving the foreground. Returns `.invalid` when refused (background time is over; why is
    /// in `lastBackgroundTaskRefusal`). `expirationHandler` runs a few seconds before the time
    /// ends and must call `endBackgroundTask` — an app still holding a task at the end is ended;
    /// one that holds none is suspended.
    public func beginBackgroundTask(
        withName name: String? = nil, expirationHandler: (@Sendable () -> Void)? = nil
    ) async -> BackgroundTaskIdentifier {
        do {
            let grant = try await client.send(
                .post, "/v1/app/background-tasks",
                body: BeginBackgroundTaskRequest(name: name.map(PrintableText.printable)),
                as: BackgroundTaskGrant.self)
            let expiringAlready = state.withLock { state in
                state.expirationHandlers[grant.id] = expirationHandler ?? {}
                if let deadline = grant.deadline { state.backgroundDeadline = deadline }
                state.lastBackgroundTaskRefusal = nil
                return state.expirationAnnounced
            }
            // bgd's warning came while the grant was on its way: this handler has missed it.
            if expiringAlready { expirationHandler?() }
            return grant.id
        } catch {
            state.withLock { $0.lastBackgroundTaskRefusal = "\(error)" }
            return .invalid
        }
    }

    /// The tasks this process holds, begun again under their identifiers with a bgd met again
    /// (one that restarted knows nothing of them). Before, the new bgd took the app for holding
    /// none and suspended it mid-work, with no warning. One bgd no longer grants has its
    /// expiration handler run: the app must wrap it up.
    func beginHeldTasksAgain() async {
        let held = state.withLock { $0.expirationHandlers }.sorted { $0.key.rawValue < $1.key.rawValue }
        for (identifier, handler) in held {
            do {
                let grant = try await client.send(
                    .post, "/v1/app/background-tasks", body: BeginBackgroundTaskRequest(name: nil, id: identifier),
                    as: BackgroundTaskGrant.self)
                let ended = state.withLock { state in
                    if let deadline = grant.deadline { state.backgroundDeadline = deadline }
                    return state.expirationHandlers[identifier] == nil
                }
                // Ended while this was on its way (its end found nothing to end): ended again.
                if ended { try? await client.send(.delete, "/v1/app/background-tasks/\(identifier)") }
            } catch let error as BackgroundError where error.apiErrorCode == .backgroundTimeExpired {
                handler()  // refused: its time is over
            } catch {
                return  // not now (bgd went away again, or is busy): the next connection tries again
            }
        }
    }

    /// `endBackgroundTask(_:)`: the work is done (or given up).
    public func endBackgroundTask(_ identifier: BackgroundTaskIdentifier) async {
        guard identifier != .invalid, state.withLock({ $0.expirationHandlers.removeValue(forKey: identifier) }) != nil
        else { return }
        try? await client.send(.delete, "/v1/app/background-tasks/\(identifier)")
    }

    /// Why the last `beginBackgroundTask` returned `.invalid` (nil after one that succeeded).
    public var lastBackgroundTaskRefusal: String? { state.withLock { $0.lastBackgroundTaskRefusal } }

    /// `backgroundTimeRemaining`: seconds of background time left; infinite in the foreground.
    public var backgroundTimeRemaining: TimeInterval {
        let (appState, deadline) = state.withLock { ($0.applicationState, $0.backgroundDeadline) }
        if appState.isForeground { return .infinity }
        guard let deadline else { return .infinity }
        return max(0, deadline.timeIntervalSince(clock.now))
    }

    /// Runs `body` with background time held: a task named `name` is begun first and ended
    /// after, and expiration reaches `body` as cancellation. Throws `BackgroundError` when bgd
    /// refuses the time — and then `body` has not run: it starts once the time is granted
    /// (before, it started at once and ran on, cancelled, after a refusal).
    public func withBackgroundTime<T: Sendable>(
        named name: String? = nil, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let expiration = ExpirationLatch<T>()
        // Begun and ended outside the caller's task: a caller cancelled meanwhile cancelled the
        // request, so a grant bgd made was never heard of, or never ended — and an app still
        // holding a task when its time runs out is ended instead of suspended.
        let identifier = await Task { await beginBackgroundTask(withName: name) { expiration.expire() } }.value
        guard identifier != .invalid else {
            throw BackgroundError.api(
                status: 409, code: "backgroundTimeExpired",
                reason: lastBackgroundTaskRefusal ?? "background time refused")
        }
        guard !Task.isCancelled else {
            await Task { await endBackgroundTask(identifier) }.value
            throw CancellationError()
        }
        let work = Task { try await body() }
        expiration.watch(work)
        let result = await withTaskCancellationHandler {
            await work.result
        } onCancel: {
            work.cancel()
        }
        await Task { await endBackgroundTask(identifier) }.value
        return try result.get()
    }

    /// bgd says background time ends at `deadline`: every held task's expiration handler runs now.
    func backgroundTimeExpiring(deadline: Date) {
        let handlers = state.withLock { state in
            state.backgroundDeadline = deadline
            state.expirationAnnounced = true
            return Array(state.expirationHandlers.values)
        }
        for handler in handlers { handler() }
    }
}

/// Cancels `withBackgroundTime`'s work when its time expires — also when the expiration came
/// before the work started (the grant came with bgd's warning already sent).
private final class ExpirationLatch<T: Sendable>: Sendable {
    private let state = Mutex<(expired: Bool, work: Task<T, any Error>?)>((false, nil))

    func expire() {
        let work = state.withLock { state -> Task<T, any Error>? in
            state.expired = true
            return state.work
        }
        work?.cancel()
    }

    func watch(_ work: Task<T, any Error>) {
        let expired = state.withLock { state -> Bool in
            state.work = work
            return state.expired
        }
        if expired { work.cancel() }
    }
}
