import BackgroundModel
import Synchronization

/// The iOS-shaped layer over `BackgroundApplication`, so code written against
/// `UIApplicationDelegate` ports line by line.
///
/// ```swift
/// final class AppDelegate: BackgroundApplicationDelegate {
///     func application(_ application: BackgroundApplication,
///                      performFetchWithCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void) {
///         fetchNewsItems { haveNewContent in completionHandler(haveNewContent ? .newData : .noData) }
///     }
/// }
/// ```
public protocol BackgroundApplicationDelegate: AnyObject, Sendable {
    /// `application(_:performFetchWithCompletionHandler:)`: fetch, then call the handler once.
    func application(
        _ application: BackgroundApplication,
        performFetchWithCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void)

    /// The fetch's budget is about to end: stop, save, and call the completion handler now.
    func applicationBackgroundFetchWillExpire(_ application: BackgroundApplication)

    /// bgd launched the app for a background session's events: store the handler, (re)create
    /// the session with this identifier, and call the handler from
    /// `urlSessionDidFinishEvents(forBackgroundURLSession:)`.
    func application(
        _ application: BackgroundApplication, handleEventsForBackgroundURLSession identifier: String,
        completionHandler: @escaping @Sendable () -> Void)

    /// The device token `registerForRemoteNotifications()` obtained (64 hex digits).
    func application(
        _ application: BackgroundApplication, didRegisterForRemoteNotificationsWithDeviceToken deviceToken: String)

    /// A background push (`content-available: 1`) woke the app: fetch what it announces, then
    /// call the handler once, within the 30-second budget, as for a background fetch.
    func application(
        _ application: BackgroundApplication, didReceiveRemoteNotification userInfo: RemoteNotification,
        fetchCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void)
}

extension BackgroundApplicationDelegate {
    public func applicationBackgroundFetchWillExpire(_ application: BackgroundApplication) {}
    public func application(
        _ application: BackgroundApplication, handleEventsForBackgroundURLSession identifier: String,
        completionHandler: @escaping @Sendable () -> Void
    ) { completionHandler() }

    public func application(
        _ application: BackgroundApplication, didRegisterForRemoteNotificationsWithDeviceToken deviceToken: String
    ) {}

    public func application(
        _ application: BackgroundApplication, didReceiveRemoteNotification userInfo: RemoteNotification,
        fetchCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void
    ) { completionHandler(.noData) }
}

/// Bridges a completion-handler callback to async: the first call to the handler is the answer,
/// later calls are ignored (an app that calls it twice counts once). Cancelled (the run's time is
/// up), it answers nil at once: a delegate that never calls its handler no longer holds the
/// answer, the event and its place in the app for ever.
enum CompletionOnce {
    static func await<T: Sendable>(_ start: (@escaping @Sendable (T) -> Void) -> Void) async -> T? {
        let answer = Answer<T>()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                answer.wait(continuation)
                start { result in answer.give(result) }
            }
        } onCancel: {
            answer.give(nil)
        }
    }

    /// The first answer, and who waits for it (an answer may come before the wait begins: a
    /// cancellation already under way).
    private final class Answer<T: Sendable>: Sendable {
        private struct State {
            var given: T??
            var waiter: CheckedContinuation<T?, Never>?
        }
        private let state = Mutex(State())

        func give(_ value: T?) {
            let waiter = state.withLock { state -> CheckedContinuation<T?, Never>? in
                guard state.given == nil else { return nil }
                state.given = .some(value)
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(returning: value)
        }

        func wait(_ continuation: CheckedContinuation<T?, Never>) {
            let given = state.withLock { state -> T?? in
                if state.given == nil { state.waiter = continuation }
                return state.given
            }
            if let given { continuation.resume(returning: given) }
        }
    }
}
