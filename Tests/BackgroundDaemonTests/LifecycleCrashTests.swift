import Background
import BackgroundModel
import BackgroundTesting
import BackgroundDaemon
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A bgd killed while an app is suspended must not leave it stopped for ever: the next bgd
/// continues it (and only it: the pid's start time must match).
@Suite(.timeLimit(.minutes(2)))
struct LifecycleCrashTests {
    @Test func theNextBgdContinuesAnAppAKilledOneHadSuspended() async throws {
        let directory = TemporaryDirectory.make()
        let state = directory + "/state"
        let socket = directory + "/bgd.sock"
        let arguments = ["--suspension-delay", "0.05s", "--conditions", "unconstrained"]
        var daemon: DaemonProcess? = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        let admin = DaemonClient(socketPath: socket)
        let app = "com.example.suspended"
        let token = try await admin.send(
            .post, "/v1/apps", body: RegisterAppRequest(id: AppID(rawValue: app)!, launchCommand: LaunchCommand(["/bin/false"])!),
            as: RegisteredApp.self
        ).token
        let log = directory + "/app.log"
        let command = LaunchCommand([try BuiltProducts.path(of: "bgd-fixture-app"), "foreground", app, token, socket, log, "idle"])!
        let process = try ProcessLauncher().launch(
            LaunchSpec(command: command, environment: ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("BGD_") },
                workingDirectory: directory, logFile: directory + "/app.out"))
        defer { process.signalGroup(SIGKILL) }
        // Real time here (a real bgd, 50 ms of suspension delay): ask bgd until it has stopped the app.
        var suspended = false
        for _ in 0..<5_000 where !suspended {
            let status = try await admin.send(.get, "/v1/apps", as: [AppSummary].self).first?.lifecycle
            suspended = status?.state == .suspended && ((try? processState(process.processID)) ?? nil) == "T"
        }
        #expect(suspended, "the app was suspended")
        daemon?.signal(SIGKILL)
        _ = await daemon?.waitForExit()
        daemon = nil
        #expect(((try? processState(process.processID)) ?? nil) == "T", "still stopped: nobody continued it")
        let next = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        #expect(await eventually { ((try? processState(process.processID)) ?? nil) != "T" }, "the next bgd continued it")
        next.signal(SIGTERM)
        _ = await next.waitForExit()
    }
}
