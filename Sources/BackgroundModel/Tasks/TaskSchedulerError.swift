/// Why `BGTaskScheduler.submit` refused a request (the real one's error codes).
public enum TaskSchedulerError: String, Error, Codable, Sendable, CaseIterable, CustomStringConvertible {
    /// The app has Background App Refresh off (its fetch interval is `never`): no refresh tasks.
    case unavailable
    /// The app already has 1 refresh or 10 processing requests pending.
    case tooManyPendingTaskRequests
    /// The identifier was not declared when the app was registered (`--task-identifier`).
    case notPermitted

    public var description: String {
        switch self {
        case .unavailable:
            "background app refresh is off for this app (fetch interval 'never'): refresh tasks are unavailable"
        case .tooManyPendingTaskRequests:
            "too many pending task requests (at most 1 app refresh and 10 processing per app)"
        case .notPermitted: "the identifier was not declared at registration (bgctl register … --task-identifier ID)"
        }
    }
}
