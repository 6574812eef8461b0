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

    /// What of bgd's own environment a launched process does not inherit: bgd's (`BGD_*`, set
    /// anew for the app) and what systemd tells the service it starts — about its notify socket,
    /// watchdog and journal stream (an app using sd_notify would have systemd log a refused
    /// message at every launch; one whose logger looks for `JOURNAL_STREAM` sent its lines to the
    /// journal as bgd's, not to its launch log, where its stderr is), its invocation, its
    /// sockets (`LISTEN_*`, removed at start too: `ActivatedSocket.take`), and its own
    /// directories and credentials (`StateDirectory=`, `LoadCredential=` in a unit an operator
    /// writes: an app would have written in bgd's state, and read bgd's secrets). bgd reads some
    /// of these all along, so they stay in its own environment. The rest (PATH, HOME, locale) is
    /// the app's.
    public static func inherits(_ name: String) -> Bool {
        !name.hasPrefix("BGD_") && !name.hasPrefix("LISTEN_") && !systemdServiceVariables.contains(name)
    }

    private static let systemdServiceVariables: Set<String> = [
        "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM", "INVOCATION_ID", "SYSTEMD_EXEC_PID",
        "MANAGERPID", "CREDENTIALS_DIRECTORY", "STATE_DIRECTORY", "RUNTIME_DIRECTORY", "CACHE_DIRECTORY",
        "LOGS_DIRECTORY", "CONFIGURATION_DIRECTORY",
    ]
}
