import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation

/// Starts the fixture as an app the user runs (`bgd-fixture-app foreground …`, see
/// Tests/Fixtures/FixtureApp/ForegroundFixture.swift): a process of its own, in a session of its
/// own, with none of bgd's settings in its environment. Its output goes to `directory/<log>.out`.
/// `joining`: a cgroup it moves itself into before it starts (as if started by a process there).
func launchForegroundApp(
    _ app: String, token: String, socket: String, log: String, mode: String, in directory: String,
    joining cgroup: String? = nil
) throws -> LaunchedProcess {
    let fixture = [try BuiltProducts.path(of: "bgd-fixture-app"), "foreground", app, token, socket, log, mode]
    let command = LaunchCommand(
        cgroup.map { ["/bin/sh", "-c", #"echo $$ > "$0/cgroup.procs" && exec "$@""#, $0] + fixture } ?? fixture)!
    return try ProcessLauncher().launch(
        LaunchSpec(
            command: command, environment: ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("BGD_") },
            workingDirectory: directory, logFile: log + ".out"))
}
