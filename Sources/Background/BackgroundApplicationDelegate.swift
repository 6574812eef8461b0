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
/// later calls are ignored (an app that calls it twice counts once).
enum CompletionOnce {
    static func await<T: Sendable>(_ start: (@escaping @Sendable (T) -> Void) -> Void) async -> T {
        await withCheckedContinuation { continuation in
            let called = Mutex(false)
            start { result in
                let first = called.withLock { called in
                    defer { called = true }
                    return !called
                }
                if first { continuation.resume(returning: result) }
            }
        }
    }
}
