import Foundation

/// Where bgd keeps its state and its socket, by the XDG conventions (like `systemd --user`).
public enum DaemonLocation {
    /// `$XDG_STATE_HOME/bgd`, else `~/.local/state/bgd`.
    public static func defaultStateDirectory(
        environment: [String: String] = ProcessInfo.processInfo.environment
    )
        -> String
    {
        if let state = environment["XDG_STATE_HOME"], state.hasPrefix("/") { return state + "/bgd" }
        return home(environment) + "/.local/state/bgd"
    }

    /// `$BGD_SOCKET`, else `$XDG_RUNTIME_DIR/bgd/bgd.sock`, else — where systemd's runtime
    /// directory for this user has a bgd socket (`/run/user/UID`; a shell from `su`, `sudo -u` or
    /// cron has no `XDG_RUNTIME_DIR`, and bgctl said "not running" of the bgd systemd runs) —
    /// that one, else `<state directory>/run/bgd.sock`.
    public static func defaultSocketPath(
        stateDirectory: String? = nil, environment: [String: String] = ProcessInfo.processInfo.environment,
        userRuntimeDirectories: String = "/run/user"
    ) -> String {
        if let socket = environment[LaunchEnvironment.socket], !socket.isEmpty { return socket }
        if let runtime = environment["XDG_RUNTIME_DIR"], runtime.hasPrefix("/") { return runtime + "/bgd/bgd.sock" }
        let systemds = "\(userRuntimeDirectories)/\(getuid())/bgd/bgd.sock"
        if FileManager.default.fileExists(atPath: systemds) { return systemds }
        return (stateDirectory ?? defaultStateDirectory(environment: environment)) + "/run/bgd.sock"
    }

    /// The operator's credential for the bgd serving `socketPath`: a token in a file beside the
    /// socket, readable by bgd's user alone, which `bgctl` sends on every operator endpoint.
    public static func operatorTokenPath(socketPath: String) -> String { socketPath + ".operator-token" }

    /// The app's token, in a file of its own container (0600): a foreground app connects with
    /// `BackgroundApplication(appID:)` and no copy-paste. bgd writes it at registration and on
    /// every rotation (`bgctl token APP --rotate`).
    public static func appTokenPath(of app: AppID, stateDirectory: String) -> String {
        containerPath(of: app, stateDirectory: stateDirectory) + "/app-token"
    }

    /// The app's own directory in bgd's state directory: its token, its transfers' files, what
    /// the library remembers across launches.
    public static func containerPath(of app: AppID, stateDirectory: String) -> String {
        stateDirectory + "/containers/" + app.rawValue
    }

    private static func home(_ environment: [String: String]) -> String {
        if let home = environment["HOME"], home.hasPrefix("/") { return home }
        return FileManager.default.homeDirectoryForCurrentUser.path
    }
}
