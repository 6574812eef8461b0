import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundPolicy
import BackgroundTesting
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Finite-length background tasks and suspension, with a real app process the user "runs" (the
/// test starts it in its own process group), bgd's virtual clock, and the process state in /proc.
@Suite(.timeLimit(.minutes(5)))
struct LifecycleTests {
    static let app = "com.example.lifecycle"

    struct Foreground {
        let process: LaunchedProcess
        let logPath: String
        var log: [String] {
            ((try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
        /// The process state letter in /proc (R, S running or sleeping; T stopped; nil: gone).
        var state: Character? { (try? processState(process.processID)) ?? nil }
        func stop() {
            process.signalGroup(SIGKILL)
        }
        /// Waits for the kernel to act on a signal bgd sent (it does within microseconds; this
        /// yields instead of sleeping, and gives up after many tries).
        func settles(to expected: Character?) async -> Bool { await eventually { state == expected } }
        /// Waits for bgd to have it suspended: frozen in its cgroup, or stopped (signals).
        func settlesSuspended() async -> Bool { await eventually { isSuspended(process.processID) } }
        func logs(_ line: String) async -> Bool { await eventually { log.contains(line) } }

    }

    /// Starts the fixture as a foreground app in `mode`; returns once it holds its task (or, for
    /// `idle`, is in the background) with its event stream open.
    func startForeground(_ mode: String, in daemon: TestDaemon, token: String) async throws -> Foreground {
        let logPath = daemon.directory + "/foreground-\(mode).log"
        let settled = Settled()
        let process = try await daemon.waitFor(
            { activity -> LaunchedProcess? in
                switch activity {
                case .appConnected(let app) where app.rawValue == Self.app: settled.mark("connected")
                case .backgroundTaskBegun(let app, _) where app.rawValue == Self.app: settled.mark("task")
                case .lifecycleChanged(let app, .background, nil) where app.rawValue == Self.app:
                    settled.mark("background")
                default: break
                }
                let needed: Set<String> =
                    mode == "idle"
                    ? ["connected", "background"]
                    : mode == "finish" ? ["connected", "background"] : ["connected", "task"]
                return settled.has(needed) ? settled.process : nil
            },
            after: {
                settled.process = try launchForegroundApp(
                    Self.app, token: token, socket: daemon.socketPath, log: logPath, mode: mode, in: daemon.directory)
            })
        let foreground = Foreground(process: process, logPath: logPath)
        // The app has its grant (and its expiration handler registered), not only bgd.
        if !["idle", "scoped"].contains(mode) { #expect(await foreground.logs("began 1")) }
        return foreground
    }

    /// Waits, after `trigger`, for bgd to end the app for overrunning its background time.
    func waitForOverrun(_ daemon: TestDaemon, after trigger: () async throws -> Void) async throws -> DecisionReason {
        try await daemon.waitFor(
            { activity -> DecisionReason? in
                if case .lifecycleChanged(let app, _, let reason?) = activity, app.rawValue == Self.app,
                    reason.code == .backgroundTimeOverrun
                {
                    return reason
                }
                return nil
            }, after: trigger)
    }

    func waitForSuspension(
        _ daemon: TestDaemon, after trigger: () async throws -> Void = {}
    ) async throws -> DecisionReason? {
        try await daemon.waitFor(
            { activity -> DecisionReason?? in
                if case .lifecycleChanged(let app, .suspended, let reason) = activity, app.rawValue == Self.app {
                    return .some(reason)
                }
                return nil
            }, after: trigger)
    }

    /// Ends its task well within its time: no expiration handler, not ended — suspended as any
    /// app in the background with nothing to do — and an event resumes it, warm.
    @Test func anAppThatEndsItsTaskInTimeIsSuspendedAndAnEventResumesIt() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            var foreground: Foreground?
            foreground = try await startForeground("finish", in: daemon, token: token)
            let app = try #require(foreground)
            defer { app.stop() }
            #expect(await app.logs("ending 1"))
            // Nothing to do in the background: suspended a few seconds after leaving the foreground.
            daemon.clock.advance(by: .seconds(4))
            #expect(await app.settles(to: "S") || app.state == "R")
            let reason = try await waitForSuspension(daemon) { daemon.clock.advance(by: .seconds(1)) }
            #expect(reason?.code == .suspendedInBackground)
            #expect(await app.settlesSuspended(), "frozen in its cgroup (or stopped with SIGSTOP)")
            #expect(!app.log.contains("expire-task"), "\(app.log)")
            #expect(app.log.contains("remaining inf") && app.log.contains("remaining finite"))
            // An event continues it (no launch), it answers, and it is suspended again.
            let run = try await daemon.waitForRunEnd(of: Self.app) {
                _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/fetch", as: RunRecord.self)
            }
            #expect(run.outcome == .newData && !run.launched, "\(run)")
            #expect(app.log.contains("fetch") && app.log.contains("note resumedInBackground"), "\(app.log)")
            _ = try await waitForSuspension(daemon) { daemon.clock.advance(by: .seconds(5)) }
            #expect(await app.settlesSuspended())
            // The user opens it: thawed, so it can come to the foreground (it runs again), and
            // suspended again after the delay when it stays in the background.
            let resumed = try await daemon.waitFor(
                { activity -> DecisionReason?? in
                    if case .lifecycleChanged(let changed, .background, let reason) = activity,
                        changed.rawValue == Self.app
                    {
                        return .some(reason)
                    }
                    return nil
                },
                after: { _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/opens") })
            #expect(resumed?.code == .resumedForOpen, "\(String(describing: resumed))")
            #expect(await eventually { !isSuspended(app.process.processID) }, "thawed")
            _ = try await waitForSuspension(daemon) { daemon.clock.advance(by: .seconds(5)) }
            #expect(await app.settlesSuspended())
        }
    }

    /// An app the user runs that dies handling a run bgd gave it (no launch: it was running):
    /// the run ends `crashed` as its process exits, as a launched process's would, and a push it
    /// carried would go again. Before, bgd told only the app's lifecycle of the exit, and the run
    /// sat out its budget and ended `expired`.
    @Test func aRunGivenToARunningAppEndsWhenItsProcessDies() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            let app = try await startForeground("crash-on-fetch", in: daemon, token: token)
            defer { app.stop() }
            let run = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/fetch", as: RunRecord.self)
            #expect(!run.launched)
            // The virtual clock stands still: only the exit can end the run.
            #expect(try await eventuallyAsync { try await daemon.store.run(run.id)?.outcome != nil })
            let ended = try await daemon.store.run(run.id)
            #expect(ended?.outcome == .crashed, "\(String(describing: ended))")
            #expect(ended?.detail?.contains("before answering") == true && app.log.contains("fetch"))
        }
    }

    /// Holds its task past the warning: its expiration handler runs and ends the task, and it is
    /// suspended — then later resumed by an event.
    @Test func anOverrunningAppGetsItsExpirationHandlerAndIsSuspended() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            let app = try await startForeground("cooperate", in: daemon, token: token)
            defer { app.stop() }
            #expect(!isSuspended(app.process.processID))
            // 25 s on (30 s of background time, warned 5 s before the end).
            let reason = try await waitForSuspension(daemon) { daemon.clock.advance(by: .seconds(25)) }
            #expect(reason?.code == .suspendedInBackground)
            #expect(app.log.contains("expire-task") && app.log.contains("ending 1"), "\(app.log)")
            #expect(await app.settlesSuspended())
            let run = try await daemon.waitForRunEnd(of: Self.app) {
                _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/fetch", as: RunRecord.self)
            }
            #expect(run.outcome == .newData && app.log.contains("fetch"), "\(run) \(app.log)")
        }
    }

    /// Ignores the expiration: still holds its task when the time is up, and is ended.
    @Test func anAppThatIgnoresExpirationIsEnded() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            let app = try await startForeground("ignore", in: daemon, token: token)
            defer { app.stop() }
            _ = try await daemon.waitFor(
                { activity -> Bool? in
                    if case .backgroundTimeExpiring(let id, _) = activity, id.rawValue == Self.app { return true }
                    return nil
                }, after: { daemon.clock.advance(by: .seconds(25)) })
            #expect(await app.logs("expire-task"))
            let reason = try await waitForOverrun(daemon) { daemon.clock.advance(by: .seconds(5)) }
            #expect(reason.detail.contains("30s"))
            let status = await app.process.waitForExit()
            #expect("\(status)".contains("SIGTERM") || "\(status)".contains("signal"), "\(status)")
            #expect(!app.log.contains { $0.hasPrefix("ending") })
        }
    }

    /// Runs `body` with the fixture in the background holding a task it will not end.
    func withAppHoldingATask(
        _ body: @Sendable (TestDaemon, Foreground, AppID, LifecycleSupervisor) async throws -> Void
    ) async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            let app = try await startForeground("ignore", in: daemon, token: token)
            defer { app.stop() }
            try await body(daemon, app, AppID(rawValue: Self.app)!, daemon.daemon.lifecycle)
        }
    }

    /// Background time is time the machine runs: the wall clock set a day ahead, then the
    /// machine asleep an hour, spend none of it — the app is warned 25 s and ended 30 s into its
    /// time as it ran. Before, the step ended it at once (no time for its expiration handler),
    /// and so did waking from the sleep.
    @Test func backgroundTimeIgnoresTheWallClockAndTheMachinesSleep() async throws {
        try await withAppHoldingATask { daemon, app, id, lifecycle in
            daemon.clock.advance(by: .seconds(10))
            daemon.clock.jump(by: .seconds(86400))
            daemon.clock.suspend(for: .seconds(3600))
            daemon.clock.advance(by: .seconds(1))
            #expect(await lifecycle.status(of: id)?.reason == nil, "neither warned nor ended")
            #expect(!app.log.contains("expire-task"))
            // Its deadline as it is told: 19 s of running from now, on today's wall clock.
            let deadline = try #require(await lifecycle.status(of: id)?.deadline)
            #expect(abs(deadline.timeIntervalSince(daemon.clock.now) - 19) < 1, "\(deadline) \(daemon.clock.now)")
            _ = try await daemon.waitFor(
                { activity -> Bool? in
                    if case .backgroundTimeExpiring(let expiring, _) = activity, expiring == id { return true }
                    return nil
                }, after: { daemon.clock.advance(by: .seconds(14)) })
            let reason = try await waitForOverrun(daemon) { daemon.clock.advance(by: .seconds(5)) }
            #expect(reason.detail.contains("30s"))
        }
    }

    /// A connection that drops while the app's process runs on (it connects again) is no
    /// departure: the app keeps its state and its task, and its time is still enforced. Before,
    /// it was forgotten — never warned or ended again.
    @Test func aDroppedConnectionKeepsARunningAppsState() async throws {
        try await withAppHoldingATask { daemon, _, id, lifecycle in
            await lifecycle.disconnected(id)
            let status = await lifecycle.status(of: id)
            #expect(status?.state == .background && status?.tasks.count == 1, "\(String(describing: status))")
            _ = try await daemon.waitFor(
                { activity -> Bool? in
                    if case .backgroundTimeExpiring(let expiring, _) = activity, expiring == id { return true }
                    return nil
                }, after: { daemon.clock.advance(by: .seconds(25)) })
        }
    }

    /// A process bgd launched goes with its stream (it closes it as it exits, and may linger a
    /// moment): its entry does not stay behind as a running process's does.
    @Test func aLaunchedProcessGoesWithItsStream() async throws {
        try await TestDaemon.with { daemon in
            _ = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never)
            let id = AppID(rawValue: Self.app)!
            let lingering = try Spawned("/bin/sleep", ["1000"])
            defer { lingering.signal(SIGKILL) }
            let lifecycle = daemon.daemon.lifecycle
            _ = await lifecycle.report(
                LifecycleReport(state: .background, processID: lingering.processID), from: id, launched: true)
            await lifecycle.disconnected(id)
            #expect(await lifecycle.status(of: id) == nil)
        }
    }

    /// With suspension off, an app whose background time is up is ended, not stopped.
    @Test func withSuspensionOffTheAppIsEndedWhenItsTimeIsUp() async throws {
        try await TestDaemon.with(backgroundTime: BackgroundTimePolicy(suspensionEnabled: false)) { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            let app = try await startForeground("idle", in: daemon, token: token)
            defer { app.stop() }
            daemon.clock.advance(by: .seconds(29))
            #expect(!isSuspended(app.process.processID))
            let reason = try await daemon.waitFor(
                { activity -> DecisionReason? in
                    if case .lifecycleChanged(let id, _, let reason?) = activity, id.rawValue == Self.app {
                        return reason
                    }
                    return nil
                }, after: { daemon.clock.advance(by: .seconds(1)) })
            #expect(reason.code == .suspensionUnavailable)
            _ = await app.process.waitForExit()
        }
    }

    /// The scoped form: expiration reaches the work as cancellation, and the time is given back.
    @Test func withBackgroundTimeTurnsExpirationIntoCancellation() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            let app = try await startForeground("scoped", in: daemon, token: token)
            defer { app.stop() }
            _ = try await waitForSuspension(daemon) { daemon.clock.advance(by: .seconds(25)) }
            #expect(app.log.contains("cancelled"), "\(app.log)")
        }
    }

    /// A crashed app's tasks go with it: nothing is held, nothing is enforced against its pid.
    @Test func aCrashedAppsTasksAreCleanedUp() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            var started: Foreground?
            let reason = try await daemon.waitFor(
                { activity -> DecisionReason? in
                    if case .lifecycleChanged(let id, _, let reason?) = activity, id.rawValue == Self.app,
                        reason.code == .backgroundTimeExpired
                    {
                        return reason
                    }
                    return nil
                }, after: { started = try await startForeground("crash", in: daemon, token: token) })
            #expect(reason.detail.contains("went away"))
            _ = await started?.process.waitForExit()
            let overview = try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self)
            #expect(overview.lifecycles.isEmpty, "\(overview)")
        }
    }

    /// In-process (never signalled): infinite time in the foreground, a deadline in the
    /// background, `.invalid` with a reason once the time is over; bad input changes nothing.
    @Test func beginIsRefusedOnceTheTimeIsOver() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            // The app's time is bgd's: what remains is counted down as bgd's clock moves.
            let application = BackgroundApplication(
                appID: AppID(rawValue: Self.app)!, token: token, socketPath: daemon.socketPath, clock: daemon.clock)
            try await application.applicationDidBecomeActive()
            #expect(application.backgroundTimeRemaining == .infinity)
            // Any name, as iOS takes it: the library makes it printable (bgd refuses control
            // characters, which bgctl would print to the operator's terminal).
            let first = await application.beginBackgroundTask(withName: "foreground\nwork")
            #expect(first != .invalid, "\(application.lastBackgroundTaskRefusal ?? "")")
            let held = try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self).lifecycles.first?.tasks
            #expect(held?.map(\.name) == ["foreground work"])
            await application.endBackgroundTask(first)
            try await application.applicationDidEnterBackground()
            #expect(application.backgroundTimeRemaining == 30)
            daemon.clock.advance(by: .seconds(12))
            #expect(application.backgroundTimeRemaining == 18)
            daemon.clock.advance(by: .seconds(19))
            #expect(application.backgroundTimeRemaining == 0)
            let refused = await application.beginBackgroundTask(withName: "too late")
            #expect(refused == .invalid)
            #expect(
                application.lastBackgroundTaskRefusal?.contains("background time is over") == true,
                "\(application.lastBackgroundTaskRefusal ?? "")")
            // The scoped form refused: its work never starts (it began before the answer came).
            let ran = Mutex(false)
            await #expect(throws: BackgroundError.self) {
                try await application.withBackgroundTime(named: "too late") { ran.withLock { $0 = true } }
            }
            #expect(!ran.withLock { $0 }, "the work ran though the time was refused")
            // Not suspended: the app runs inside bgd's own process.
            let status = try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self).lifecycles.first
            #expect(status?.state == .background && status?.tasks.isEmpty == true)
            // Bad input: an app cannot claim to be suspended, nor end a task it never had.
            do {
                try await DaemonClient(socketPath: daemon.socketPath, token: token).send(
                    .post, "/v1/app/state", body: LifecycleReport(state: .suspended, processID: 1))
                Issue.record("reporting 'suspended' must be refused")
            } catch let error as BackgroundError {
                #expect(error.apiErrorCode == .invalidState)
            }
            do {
                try await DaemonClient(socketPath: daemon.socketPath, token: token).send(
                    .delete, "/v1/app/background-tasks/99")
                Issue.record("ending an unknown task must be refused")
            } catch let error as BackgroundError {
                #expect(error.apiErrorCode == .unknownBackgroundTask)
            }
        }
    }
}

/// What a waiting test has seen so far.
final class Settled: @unchecked Sendable {
    private let lock = NSLock()
    private var seen: Set<String> = []
    private var launched: LaunchedProcess?
    func mark(_ what: String) { lock.withLock { _ = seen.insert(what) } }
    func has(_ needed: Set<String>) -> Bool { lock.withLock { needed.isSubset(of: seen) } }
    var process: LaunchedProcess? {
        get { lock.withLock { launched } }
        set { lock.withLock { launched = newValue } }
    }
}
