import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A foreground app survives bgd's crash (issue 14, item 5): its `run()` connects again, says
/// its state again, and the fetch bgd owed it when it died reaches it exactly once.
@Suite(.timeLimit(.minutes(5)))
struct ForegroundReconnectTests {
    /// Registers `app` (launched as `/bin/false`) with the bgd `admin` speaks to; its token.
    static func register(_ app: String, interval: FetchInterval, with admin: DaemonClient) async throws -> String {
        try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: app)!, launchCommand: LaunchCommand(["/bin/false"])!, fetchInterval: interval),
            as: RegisteredApp.self
        ).token
    }

    @Test func aForegroundAppOutlivesBgdsCrashAndGetsTheOwedFetchOnce() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let state = directory + "/state"
        let socket = directory + "/bgd.sock"
        let arguments = ["--conditions", "unconstrained", "--suspension-delay", "10m"]
        let admin = DaemonClient(socketPath: socket)
        let bgctl = try BuiltProducts.path(of: "bgctl")
        let app = "com.example.survivor"

        // bgd crashes right after it has committed a fetch run (its event in the outbox).
        var first: DaemonProcess? = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, arguments: arguments,
            environment: ["BGD_FAILPOINT": "run.afterStartCommit:once"])
        let token = try await Self.register(app, interval: .minimum, with: admin)
        let log = directory + "/app.log"
        let process = try launchForegroundApp(app, token: token, socket: socket, log: log, mode: "idle", in: directory)
        defer { process.signalGroup(SIGKILL) }
        func reported() async -> Bool {
            let summary = try? await admin.send(.get, "/v1/apps", as: [AppSummary].self).first
            return summary?.isConnected == true && summary?.lifecycle?.processID == process.processID
        }
        var connected = false
        for _ in 0..<5_000 where !connected { connected = await reported() }
        #expect(connected, "the app connected and reported its state")
        // Offline, so the owed fetch waits for the app to be back rather than launching it.
        #expect(try await Command.run(bgctl, ["env", "set", "--network", "none", "--socket", socket]).status == 0)
        _ = try? await admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
        _ = await first?.waitForExit()  // the failpoint ended it, as a kill -9 would
        first = nil

        let second = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        defer { second.signal(SIGKILL) }
        var back = false
        for _ in 0..<5_000 where !back { back = await reported() }
        #expect(back, "the app connected again and said its state to the new bgd")
        #expect(
            ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").components(separatedBy: "\n").filter {
                $0 == "fetch"
            }.isEmpty)
        // Online again: the interrupted run is made up — on the app's stream, once.
        #expect(try await Command.run(bgctl, ["env", "set", "--network", "sensed", "--socket", socket]).status == 0)
        var madeUp: RunRecord?
        for _ in 0..<5_000 where madeUp == nil {
            madeUp = try await admin.send(.get, "/v1/apps/\(app)/history", as: [RunRecord].self).first {
                $0.outcome == .newData
            }
        }
        let seen = try await admin.send(.get, "/v1/apps/\(app)/history", as: [RunRecord].self)
        let why = try await Command.run(bgctl, ["why", app, "--socket", socket]).standardOutput
        let run = try #require(madeUp, "\(seen) \(why)")
        #expect(!run.launched && run.reasons.contains { $0.code == .interruptedRun }, "\(run)")
        let fetches = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").components(separatedBy: "\n").filter {
            $0 == "fetch"
        }
        #expect(fetches.count == 1, "the owed fetch reached the app exactly once: \(fetches)")
        let history = try await admin.send(.get, "/v1/apps/\(app)/history", as: [RunRecord].self)
        #expect(history.map(\.outcome) == [.newData, .interrupted], "\(history)")
    }

    /// bgd is killed while the app it held in the background holds a background task: the app
    /// begins the task again with the next bgd, under its identifier, and so keeps its time and
    /// its expiration handler. Before, the next bgd took it for holding none, and suspended it
    /// mid-work without a warning.
    @Test func aTaskHeldAcrossBgdsCrashIsHeldWithTheNext() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let state = directory + "/state"
        let socket = directory + "/bgd.sock"
        let admin = DaemonClient(socketPath: socket)
        let app = "com.example.holder"
        var first: DaemonProcess? = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, arguments: ["--conditions", "unconstrained"])
        let token = try await Self.register(app, interval: .never, with: admin)
        let process = try launchForegroundApp(
            app, token: token, socket: socket, log: directory + "/app.log", mode: "ignore", in: directory)
        defer { process.signalGroup(SIGKILL) }
        func heldTasks() async -> [BackgroundTaskIdentifier]? {
            guard let summary = try? await admin.send(.get, "/v1/apps", as: [AppSummary].self).first,
                summary.isConnected, summary.lifecycle?.processID == process.processID
            else { return nil }
            return summary.lifecycle?.tasks.map(\.id)
        }
        var held: [BackgroundTaskIdentifier]?
        for _ in 0..<5_000 where held?.isEmpty != false { held = await heldTasks() }
        #expect(held == [BackgroundTaskIdentifier(rawValue: 1)], "the app holds its task")
        first?.signal(SIGKILL)
        _ = await first?.waitForExit()
        first = nil

        let second = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, arguments: ["--conditions", "unconstrained"])
        defer { second.signal(SIGKILL) }
        var again: [BackgroundTaskIdentifier]?
        for _ in 0..<5_000 where again?.isEmpty != false { again = await heldTasks() }
        #expect(
            again == [BackgroundTaskIdentifier(rawValue: 1)], "held with the next bgd: \(String(describing: again))")
        let summary = try await admin.send(.get, "/v1/apps", as: [AppSummary].self).first
        #expect(summary?.lifecycle?.state == .background, "\(String(describing: summary?.lifecycle))")
    }

    /// The app enters the background while bgd restarts: the transition is the app's at once
    /// (the call throws, bgd not having taken it), and the next bgd is told the app is in the
    /// background, with its time counting. Before, the app stayed active until bgd took the
    /// report, told the next bgd it was active, and ran unbounded.
    @Test func aTransitionMadeWhileBgdIsDownIsToldToTheNext() async throws {
        let directory = TemporaryDirectory.make()
        let id = "com.example.moved"
        let application = try await TestDaemon.with(directory: directory) { daemon in
            let registered = try await daemon.register(id, command: ["/bin/false"], interval: .never)
            return BackgroundApplication(
                appID: AppID(rawValue: id)!, token: registered.token, socketPath: daemon.socketPath)
        }
        let connection = Mutex<Task<Void, any Error>?>(nil)
        defer { connection.withLock { $0?.cancel() } }
        try await TestDaemon.with(directory: directory) { daemon in
            connection.withLock { $0 = Task { try await application.run() } }
            try await daemon.waitUntilConnected(id)
            try await application.applicationDidBecomeActive()
        }  // bgd stops
        await #expect(throws: BackgroundError.self) { try await application.applicationDidEnterBackground() }
        #expect(application.applicationState == .background)
        try await TestDaemon.with(directory: directory) { daemon in
            try await daemon.waitUntilConnected(id)
            #expect(
                try await eventuallyAsync {
                    try await daemon.admin.send(.get, "/v1/apps/\(id)", as: AppSummary.self).lifecycle?.state
                        == .background
                })
            #expect(await eventually { application.backgroundTimeRemaining <= 30 }, "its time counts")
        }
    }

}
