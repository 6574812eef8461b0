import BackgroundModel
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The moments `UIApplication` announces (its `…Notification`s), for `lifecycleNotifications()`.
public enum LifecycleNotification: String, Hashable, Sendable {
    case didBecomeActive
    case willResignActive
    case didEnterBackground
    case willEnterForeground
    /// bgd continued the app from suspension to handle an event (iOS says nothing; we do).
    case resumedInBackground
}

extension BackgroundApplication {
    /// Where the app is in its life (`UIApplication.applicationState`).
    public var applicationState: ApplicationState { state.withLock { $0.applicationState } }

    /// `applicationWillResignActive`: still visible, no longer receiving events.
    public func applicationWillResignActive() async throws {
        try await transition(to: .inactive, notifying: .willResignActive)
    }

    /// `applicationDidEnterBackground`: background time starts counting (30 s by default);
    /// `beginBackgroundTask` now for work that must finish, or be suspended.
    public func applicationDidEnterBackground() async throws {
        try await transition(to: .background, notifying: .didEnterBackground)
    }

    /// `applicationWillEnterForeground`: on the way back to the user (`.inactive` until active).
    public func applicationWillEnterForeground() async throws {
        try await transition(to: .inactive, notifying: .willEnterForeground)
    }

    /// Every lifecycle moment from now on, like observing `UIApplication.…Notification`s:
    /// `for await note in app.lifecycleNotifications() where note == .willEnterForeground { reload() }`.
    public func lifecycleNotifications() -> AsyncStream<LifecycleNotification> {
        let (stream, continuation) = AsyncStream<LifecycleNotification>.makeStream()
        let id = UUID()
        state.withLock { $0.lifecycleObservers[id] = continuation }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.lifecycleObservers.removeValue(forKey: id) }
        }
        return stream
    }

    /// The app is in `newState` from now, whatever bgd answers: the user moved it. bgd is then
    /// told; one that does not take it (restarting, a moment's trouble) is told at the stream's
    /// next hello or connection, and the error is thrown for the caller to know. Before, the
    /// state stayed as it was until bgd took the report: an app that entered the background
    /// while bgd restarted told the next bgd it was active, and ran unbounded.
    func transition(to newState: ApplicationState, notifying notification: LifecycleNotification) async throws {
        let observers = state.withLock { state in
            if state.applicationState != newState { state.expirationAnnounced = false }
            state.applicationState = newState
            state.backgroundDeadline = nil  // bgd's answer says
            state.stateVersion += 1
            return Array(state.lifecycleObservers.values)
        }
        for observer in observers { observer.yield(notification) }
        try await reportCurrentState()
    }

    /// Tells bgd the state the app is in, again until the state told is still the app's when
    /// bgd has answered: two transitions reported at once (or one beside the report a new
    /// connection makes) could land in the other order, and bgd keep the older.
    func reportCurrentState() async throws {
        while true {
            let (current, version) = state.withLock { state in
                // bgd suspends; an app only reports the others.
                (state.applicationState == .suspended ? .background : state.applicationState, state.stateVersion)
            }
            let status: LifecycleStatus
            do {
                status = try await reportState(current)
            } catch {
                // Told again later: a newer report may have settled meanwhile, and this older
                // one still reach bgd after it.
                state.withLock { $0.stateUnreported = true }
                throw error
            }
            let settled = state.withLock { state in
                guard state.stateVersion == version else { return false }
                state.backgroundDeadline = status.deadline
                state.stateUnreported = false
                return true
            }
            if settled { return }
        }
    }

    /// Whether a report of the app's state failed and bgd has not taken one since. (Only a
    /// failed one: a hello that came while a transition's report was on its way sent a second
    /// report, read before it — bgd was told the older state, then the newer again, and its
    /// background time started afresh.)
    var isStateUnreported: Bool { state.withLock { $0.stateUnreported } }

    @discardableResult
    func reportState(_ newState: ApplicationState) async throws -> LifecycleStatus {
        try await client.send(
            .post, "/v1/app/state", body: LifecycleReport(state: newState, processID: getpid()),
            as: LifecycleStatus.self)
    }

    /// bgd moved the app (continued it from suspension for an event).
    func bgdChangedState(to newState: ApplicationState, deadline: Date?) {
        let observers = state.withLock { state in
            state.expirationAnnounced = false  // resumed: a new stretch of background time
            state.applicationState = newState
            state.backgroundDeadline = deadline
            return Array(state.lifecycleObservers.values)
        }
        if newState == .background { for observer in observers { observer.yield(.resumedInBackground) } }
    }
}
