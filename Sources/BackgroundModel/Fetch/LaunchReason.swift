/// Why bgd started an app's process; passed as `BGD_LAUNCH_REASON`.
public enum LaunchReason: String, Codable, Sendable, CaseIterable {
    case fetch
    case remoteNotification = "remote-notification"
    case urlSession = "url-session"
    case processing
}

/// The environment bgd gives a process it launches.
public enum LaunchEnvironment {
    public static let reason = "BGD_LAUNCH_REASON"
    public static let appID = "BGD_APP_ID"
    public static let socket = "BGD_SOCKET"
    public static let token = "BGD_APP_TOKEN"
    /// A directory that belongs to the app, inside bgd's state directory.
    public static let container = "BGD_CONTAINER"
    /// The run the process was launched for.
    public static let run = "BGD_RUN_ID"
}
