import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Logging
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Apps as real processes in this machine's real cgroups (issue 14): the README's walkthrough
/// under a real interactive bash, freezing that no shell sees, ending that no fork escapes, and
/// what a run cost. Each test that needs cgroups says so and is skipped where bgd may not make
/// them (not root, no unified hierarchy).
@Suite(.timeLimit(.minutes(5)))
struct AppCgroupTests {
    final class Output: Sendable {
        private let text = Mutex("")
        func append(_ data: Data) { text.withLock { $0 += String(decoding: data, as: UTF8.self) } }
        var all: String { text.withLock { $0 } }
    }

    static let food = "com.example.deliciousfood"

    /// The README's DeliciousFood tour, typed into a real interactive bash on a pty (`script`
    /// opens it; bash has job control, the app is its foreground job): the app leaves the
    /// foreground, is suspended — frozen in its cgroup, or with cgroups off left running, since a
    /// SIGSTOP would hand the terminal back to the shell — then `bgctl simulate fetch` wakes it
    /// and it answers newData. The shell never reports `Stopped`.
    @Test(arguments: [true, false])
    func theWalkthroughUnderAnInteractiveShell(cgroups: Bool) async throws {
        if cgroups && !CgroupProbe.available { return }
        try await TestDaemon.with(appCgroups: cgroups) { daemon in
            let registered = try await daemon.register(
                Self.food, command: [try BuiltProducts.path(of: "DeliciousFood")], interval: .minimum,
                taskIdentifiers: ["com.example.deliciousfood.refresh"])
            let status = try await daemon.admin.send(.get, "/v1/status", as: DaemonStatus.self)
            #expect(
                status.appProcesses?.hasPrefix(cgroups ? "cgroups:" : "signals: turned off") == true,
                "\(status.appProcesses ?? "-")")

            var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("BGD_") }
            environment[LaunchEnvironment.token] = registered.token
            environment[LaunchEnvironment.socket] = daemon.socketPath
            environment["PS1"] = "$ "
            let terminal = try Spawned(
                "/usr/bin/script", ["-qfc", "bash --norc --noprofile -i", "/dev/null"], environment: environment,
                stdin: true, mergeErrors: true)
            let printed = Output()
            terminal.output.readabilityHandler = { printed.append($0.availableData) }
            var appPID: Int32?
            defer {
                terminal.output.readabilityHandler = nil
                if let appPID { kill(appPID, SIGKILL) }
                terminal.signal(SIGKILL)
            }
            func type(_ line: String) { terminal.input?.write(Data((line + "\n").utf8)) }

            type("'\(try BuiltProducts.path(of: "DeliciousFood"))'")
            #expect(await eventually { printed.all.contains("no dishes yet") }, "\(printed.all)")
            let pid = try #require(
                try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self).lifecycles.first?.processID)
            appPID = pid
            #expect(
                CgroupProbe.directory(of: pid)?.hasSuffix("/apps/\(Self.food)@\(pid)") == cgroups,
                "\(CgroupProbe.directory(of: pid) ?? "-")")

            let ended = try await daemon.waitFor(
                { activity -> Bool? in
                    if case .backgroundTaskEnded(let app, _) = activity, app.rawValue == Self.food { return true }
                    return nil
                }, after: { type("background") })
            #expect(ended)
            if cgroups {
                // Nothing held: suspended a few seconds after leaving the foreground — by the freezer.
                _ = try await daemon.waitFor(
                    { activity -> Bool? in
                        if case .lifecycleChanged(let app, .suspended, _) = activity, app.rawValue == Self.food {
                            return true
                        }
                        return nil
                    }, after: { daemon.clock.advance(by: .seconds(6)) })
                #expect(CgroupProbe.isFrozen(pid), "frozen in its cgroup")
                #expect(((try? processState(pid)) ?? nil) != "T", "frozen, not stopped with SIGSTOP")
            } else {
                // Past its suspension delay and its background time: a stop would come now. It must not.
                daemon.clock.advance(by: .seconds(120))
                #expect(
                    !(await eventually { ((try? processState(pid)) ?? nil) == "T" }),
                    "stopped though it is its terminal's foreground job")
                let state = try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self).lifecycles.first?
                    .state
                #expect(state == .background)
            }

            // `bgctl simulate fetch` goes to the running app (thawed first), which answers.
            let bgctl = try BuiltProducts.path(of: "bgctl")
            var answers: [String] = []
            for _ in 0..<20 where !(answers.last ?? "").contains("newData") {
                let output = try await Command.run(
                    bgctl, ["simulate", "fetch", Self.food, "--socket", daemon.socketPath])
                #expect(output.status == 0, "\(output.standardError)")
                answers.append(output.standardOutput)
            }
            #expect(answers.last?.contains("newData") == true, "\(answers)")
            #expect(!answers.contains { $0.contains("expired") || $0.contains("crashed") }, "\(answers)")
            #expect(!CgroupProbe.isFrozen(pid))
            type("list")
            #expect(await eventually { printed.all.contains("new dishes fetched in the background") }, "\(printed.all)")
            #expect(!printed.all.contains("Stopped"), "the shell saw a stop: \(printed.all)")
            type("quit")
        }
    }

    /// Registers `app` and starts it as the user would, in foreground-fixture `mode`; returns
    /// once it has left the foreground.
    func registerAndLaunchInTheBackground(
        _ app: String, mode: String, on daemon: TestDaemon, joining cgroup: String? = nil
    ) async throws -> LaunchedProcess {
        let token = try await daemon.register(app, command: ["/bin/false"], interval: .never).token
        var process: LaunchedProcess?
        _ = try await daemon.waitFor(
            { activity -> Bool? in
                if case .lifecycleChanged(let id, .background, nil) = activity, id.rawValue == app { return true }
                return nil
            },
            after: {
                process = try launchForegroundApp(
                    app, token: token, socket: daemon.socketPath, log: daemon.directory + "/\(app).log", mode: mode,
                    in: daemon.directory, joining: cgroup)
            })
        return try #require(process)
    }

    /// Lets the app's background time run out (6 s on the daemon's clock): returns once bgd has
    /// suspended it.
    func suspendInTheBackground(_ app: String, on daemon: TestDaemon) async throws {
        _ = try await daemon.waitFor(
            { activity -> Bool? in
                if case .lifecycleChanged(let id, .suspended, _) = activity, id.rawValue == app { return true }
                return nil
            }, after: { daemon.clock.advance(by: .seconds(6)) })
    }

    /// A frozen app gets no CPU, and a thawed one does again. The app burns CPU in short bursts;
    /// while it is frozen a busy loop of the test's own is the clock: 200 ms of its CPU time pass,
    /// and the app's cgroup has not used a millisecond meanwhile.
    @Test func aFrozenAppGetsNoCPUAndAThawedOneRunsAgain() async throws {
        guard CgroupProbe.available else { return }
        try await TestDaemon.with { daemon in
            let app = "com.example.spin"
            let process = try await registerAndLaunchInTheBackground(app, mode: "spin", on: daemon)
            let pid = process.processID
            defer { process.signalGroup(SIGKILL) }
            try await suspendInTheBackground(app, on: daemon)
            #expect(CgroupProbe.isFrozen(pid))
            let frozenAt = try #require(CgroupProbe.cpuMicroseconds(of: pid))
            let busy = try Spawned("/bin/sh", ["-c", "while :; do :; done"])
            defer { busy.signal(SIGKILL) }
            #expect(await eventually { (processCPU(busy.processID) ?? 0) >= 200_000 }, "the busy loop ran")
            let after = try #require(CgroupProbe.cpuMicroseconds(of: pid))
            #expect(after - frozenAt < 1_000, "a frozen app used \(after - frozenAt) µs of CPU")
            // An event thaws it, and it burns CPU again.
            let run = try await daemon.waitForRunEnd(of: app) {
                _ = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
            }
            #expect(run.outcome == .newData)
            #expect(
                await eventually { (CgroupProbe.cpuMicroseconds(of: pid) ?? 0) > after + 5_000 }, "a thawed app runs")
        }
    }

    /// A user's app killed while frozen (the freezer lets SIGKILL through: the OOM killer,
    /// `kill -9`) leaves what it started thawed and back in the cgroup it came from, and its
    /// group gone. Before, a helper it had started stayed frozen in bgd's group as long as bgd ran.
    @Test func whatAFrozenAppStartedIsThawedAndGivenBackWhenTheAppIsKilled() async throws {
        guard CgroupProbe.available else { return }
        try await TestDaemon.with { daemon in
            let app = "com.example.helped"
            let process = try await registerAndLaunchInTheBackground(app, mode: "idle", on: daemon)
            let pid = process.processID
            defer { process.signalGroup(SIGKILL) }
            let origin = try #require(CgroupProbe.directory(of: getpid()))
            let group = try #require(CgroupProbe.directory(of: pid))
            #expect(group != origin, "bgd took the app into a group of its own")
            // A helper the app started: in the app's group, as its children are.
            let helper = try Spawned("/bin/sleep", ["1000"])
            defer { helper.signal(SIGKILL) }
            try "\(helper.processID)".write(toFile: group + "/cgroup.procs", atomically: false, encoding: .utf8)
            try await suspendInTheBackground(app, on: daemon)
            #expect(CgroupProbe.isFrozen(helper.processID))

            kill(pid, SIGKILL)
            #expect(
                await eventually { CgroupProbe.directory(of: helper.processID) == origin },
                "in \(CgroupProbe.directory(of: helper.processID) ?? "?")")
            #expect(!CgroupProbe.isFrozen(helper.processID))
            #expect(await eventually { !FileManager.default.fileExists(atPath: group) }, "the app's group is removed")
        }
    }

    /// An app the user starts from another app bgd holds (a launcher, a terminal app) starts in
    /// that app's group. Taken on, it is given back, when bgd stops, where the first came from.
    /// Before, it had no origin and stayed in bgd's group after bgd had stopped. Where the v1
    /// memory hierarchy measures memory (hybrid mode), both go back there too: before, they
    /// stayed in bgd's memory groups, out of their own limits, leaving a group per adoption.
    @Test func anAppStartedFromAnotherHeldAppIsGivenBackWhereThatOneCameFrom() async throws {
        guard CgroupProbe.available else { return }
        let origin = try #require(CgroupProbe.directory(of: getpid()))
        let memoryOrigin = CgroupProbe.memoryDirectory(of: getpid())
        let outerProcess = Mutex<LaunchedProcess?>(nil)
        let inner = Mutex<LaunchedProcess?>(nil)
        try await TestDaemon.with { daemon in
            let outer = try await registerAndLaunchInTheBackground("com.example.launcher", mode: "idle", on: daemon)
            outerProcess.withLock { $0 = outer }
            let outerGroup = try #require(CgroupProbe.directory(of: outer.processID))
            if memoryOrigin != nil {
                #expect(
                    CgroupProbe.memoryDirectory(of: outer.processID) != memoryOrigin, "measured in bgd's memory group")
            }
            let started = try await registerAndLaunchInTheBackground(
                "com.example.started", mode: "idle", on: daemon, joining: outerGroup)
            inner.withLock { $0 = started }
            #expect(
                CgroupProbe.directory(of: started.processID)?.hasSuffix("/com.example.started@\(started.processID)")
                    == true)
        }
        let started = try #require(inner.withLock { $0 })
        let outer = try #require(outerProcess.withLock { $0 })
        defer {
            started.signalGroup(SIGKILL)
            outer.signalGroup(SIGKILL)
        }
        #expect(CgroupProbe.directory(of: started.processID) == origin, "given back where the launcher came from")
        if let memoryOrigin {
            for process in [outer, started] {
                #expect(
                    CgroupProbe.memoryDirectory(of: process.processID) == memoryOrigin,
                    "in \(CgroupProbe.memoryDirectory(of: process.processID) ?? "?")")
            }
        }
    }

    /// A launched app that started a grandchild in a session of its own which ignores SIGTERM:
    /// the app overruns its budget and is ended, and the grandchild with it (`cgroup.kill`; a
    /// process-group kill would miss it). The run records the CPU time the app used, and its
    /// emptied cgroup is removed.
    @Test func endingALaunchedAppLeavesNoProcessBehind() async throws {
        guard CgroupProbe.available else { return }
        try await TestDaemon.with { daemon in
            let app = "com.example.tree"
            let fixture = try BuiltProducts.path(of: "bgd-fixture-app")
            let script =
                "setsid sh -c 'trap \"\" TERM; exec sleep 1000' & echo $! > grandchild.pid; exec '\(fixture)' hang"
            _ = try await daemon.register(app, command: ["/bin/sh", "-c", script], interval: .never)
            let started = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
            let pidFile = daemon.directory + "/state/containers/\(app)/grandchild.pid"
            #expect(
                await eventually { ((try? String(contentsOfFile: pidFile, encoding: .utf8)) ?? "").hasSuffix("\n") })
            let grandchild = try #require(
                Int32(
                    try String(contentsOfFile: pidFile, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
                ))
            defer { kill(grandchild, SIGKILL) }
            let group = try #require(CgroupProbe.directory(of: grandchild))
            #expect(group.hasSuffix("/apps/\(app)"), "the grandchild is in the app's cgroup: \(group)")
            // The app never answers: expired at 30 s, ended at once (SIGTERM), SIGKILL after the grace.
            let run = try await daemon.waitForRunEnd(of: app) { daemon.clock.advance(by: .seconds(31)) }
            #expect(run.id == started.id && run.outcome == .expired, "\(run)")
            daemon.clock.advance(by: .seconds(10))
            #expect(
                await eventually { ((try? processState(grandchild)) ?? nil) == nil }, "the grandchild outlived its app")
            #expect(await eventually { access(group, F_OK) != 0 }, "the emptied cgroup is removed")
            #expect((run.cpuMicroseconds ?? 0) > 0, "the run's CPU time is recorded: \(run)")
            if FileManager.default.fileExists(atPath: "/sys/fs/cgroup/memory/cgroup.procs") {
                // Hybrid mode: the v1 memory controller measures the peak.
                // (A process's worth: it measured 1 MiB exactly once, and more other times.)
                #expect((run.memoryPeakBytes ?? 0) >= 1 << 19, "the run's peak memory is recorded: \(run)")
            }
        }
    }

    /// The mode is said, and a machine without cgroups (here: turned off) falls back to signals.
    /// The note of where a user's process came from is read back from the state directory: only a
    /// cgroup of this hierarchy outside bgd's own groups is taken, so a file that names anything
    /// else never makes bgd move a process there.
    @Test func aRecordedOriginIsOnlyACgroupOutsideBgdsOwn() throws {
        guard CgroupProbe.available else { return }
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        guard
            case .available(let cgroups) = AppCgroups.discover(
                instance: AppCgroups.instance(of: directory), origins: directory + "/cgroup-origins")
        else { Issue.record("no cgroups"); return }
        let group = try cgroups.adopted(AppID(rawValue: "com.example.origin")!, processID: 999_999)
        defer {
            group.remove()
            cgroups.removeIfEmpty()
        }
        let own = try #require(CgroupProbe.directory(of: getpid()))
        for (written, taken) in [
            (own, own), ("/etc", nil), (cgroups.root, nil), (cgroups.root + "/other@1", nil),
            (own + "/../" + (own as NSString).lastPathComponent, nil), ("", nil),
        ] as [(String, String?)] {
            cgroups.recordOrigin(written, of: group)
            #expect(cgroups.recordedOrigin(of: group) == taken, "\(written)")
        }
        cgroups.forgetOrigin(of: group)
        #expect(cgroups.recordedOrigin(of: group) == nil)
    }

    @Test func statusSaysHowAppsAreHeld() async throws {
        try await TestDaemon.with(appCgroups: false) { daemon in
            let status = try await daemon.admin.send(.get, "/v1/status", as: DaemonStatus.self)
            #expect(
                status.appProcesses
                    == "signals: turned off (--app-cgroups off); apps are stopped with SIGSTOP only when they have no terminal"
            )
            let output = try await Command.run(
                try BuiltProducts.path(of: "bgctl"), ["status", "--socket", daemon.socketPath])
            #expect(output.standardOutput.contains("processes: signals: turned off"), "\(output.standardOutput)")
        }
    }
}

/// A process's own user + system CPU time from /proc, in microseconds.
func processCPU(_ pid: Int32) -> UInt64? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return nil }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 12, let user = UInt64(fields[11]), let system = UInt64(fields[12]) else { return nil }
    return (user + system) * 1_000_000 / UInt64(sysconf(Int32(_SC_CLK_TCK)))
}

extension AppCgroupTests {
    /// A supervisor holding apps in cgroups of a bgd instance of its own, served while `body`
    /// runs, and a launch of `sleep 600` (nothing, where cgroups cannot be written).
    /// The cgroups of a bgd instance of its own (none, where cgroups cannot be written), and its
    /// directory, while `body` runs.
    func withCgroups(_ body: (AppCgroups, String) async throws -> Void) async throws {
        guard CgroupProbe.available else { return }
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        guard case .available(let cgroups) = AppCgroups.discover(instance: AppCgroups.instance(of: directory)) else {
            Issue.record("no cgroups")
            return
        }
        try await body(cgroups, directory)
    }

    func withCgroupSupervisor(_ body: (ProcessSupervisor, LaunchSpec) async throws -> Void) async throws {
        try await withCgroups { cgroups, directory in
            var logger = Logger(label: "test")
            logger.logLevel = .critical
            let supervisor = ProcessSupervisor(
                mode: .cgroups(cgroups), launcher: ProcessLauncher(), clock: ManualClock(), killGrace: .seconds(1),
                logger: logger)
            let spec = LaunchSpec(
                command: LaunchCommand(["/bin/sh", "-c", "exec sleep 600"])!, environment: ["PATH": "/usr/bin:/bin"],
                workingDirectory: directory, logFile: directory + "/launch.log")
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await supervisor.run() }
                defer { group.cancelAll() }
                try await body(supervisor, spec)
            }
        }
    }

    /// Two launches of one app share its cgroup (a push's launch starts while the last run's
    /// process lingers on its way out): ending the one ends its process group, not the cgroup,
    /// so the other runs on. Before, SIGTERM and `cgroup.kill` went to the whole group.
    @Test func endingOneLaunchOfAnAppSparesAnotherInItsCgroup() async throws {
        try await withCgroupSupervisor { supervisor, spec in
            let app = AppID(rawValue: "com.example.twice")!
            let first = try await supervisor.launch(spec, for: app).processID
            let second = try await supervisor.launch(spec, for: app).processID
            let shared = CgroupProbe.directory(of: first)
            #expect(shared != nil && shared == CgroupProbe.directory(of: second), "one cgroup for the app")
            await supervisor.terminate(first, killAfter: .seconds(1))
            #expect(await eventually { ((try? processState(first)) ?? nil) == nil }, "the first ended")
            #expect(((try? processState(second)) ?? nil) != nil, "the second runs on")
            await supervisor.kill(second)
            #expect(await eventually { ((try? processState(second)) ?? nil) == nil })
            #expect(await eventually { shared.map { access($0, F_OK) != 0 } == true }, "the emptied cgroup goes")
        }
    }

    /// An app whose id is the name of one of a cgroup's own files has no group: its launch
    /// fails, saying so. Before, the file was taken for its group, the launch for placed in it.
    @Test func anAppNamedLikeACgroupFileGetsNoGroup() async throws {
        try await withCgroups { cgroups, _ in
            defer { cgroups.removeIfEmpty() }
            for name in ["cgroup.procs", "cgroup.kill"] {
                let app = try #require(AppID(rawValue: name))
                #expect(throws: AppCgroup.Failure.self) { try cgroups.launched(app) }
            }
            let fine = try cgroups.launched(AppID(rawValue: "com.example.fine")!)
            #expect(access(fine.path + "/cgroup.procs", F_OK) == 0)
            rmdir(fine.path)
        }
    }

    /// A launch frozen while another shared the app's cgroup is stopped by a signal (freezing
    /// the cgroup would freeze the other too); thawed once alone in it, it runs again. Before,
    /// its thaw only thawed the cgroup, and it stayed stopped for good.
    @Test func aLaunchFrozenBesideAnotherRunsAgainWhenThawedAlone() async throws {
        try await withCgroupSupervisor { supervisor, spec in
            let app = AppID(rawValue: "com.example.stopped")!
            let lingering = try await supervisor.launch(spec, for: app).processID
            let frozen = try await supervisor.launch(spec, for: app).processID
            #expect(await supervisor.freeze(frozen))
            #expect(
                await eventually { ((try? processState(frozen)) ?? nil) == "T" },
                "stopped by a signal beside the other: \(String(describing: try? processState(frozen)))")
            await supervisor.kill(lingering)
            #expect(await eventuallyAsync { await supervisor.phase(of: lingering) == nil }, "reaped: alone now")
            await supervisor.thaw(frozen)
            #expect(await eventually { ((try? processState(frozen)) ?? nil) == "S" }, "runs again")
            await supervisor.kill(frozen)
            #expect(await eventually { ((try? processState(frozen)) ?? nil) == nil })
        }
    }
}
