import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Logging
import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Owns every app process bgd launched or was told about: it spawns them (in their app's
/// cgroup), watches them exit (reaping its own children), freezes and thaws them, and ends them
/// — SIGTERM, a grace, SIGKILL — on the timeline `ProcessControl` keeps for each. Nothing else in
/// bgd signals a process.
///
/// Two modes, chosen once at start (`bgctl status` says which and why):
/// - **cgroups**: each app in its own cgroup v2 (`AppCgroups`). Freezing is the kernel's freezer,
///   which no parent or shell can see; ending is `cgroup.kill`, which no fork or `setsid`
///   escapes; `cpu.stat` says what a run cost.
/// - **signals**: SIGSTOP/SIGCONT and SIGTERM/SIGKILL to the process group. SIGSTOP goes only to
///   a process that leads a session of its own and has no terminal (as bgd launches them), so no
///   shell's job control ever sees it; any other's background time still expires, it is just not
///   stopped.
public actor ProcessSupervisor: Service {
    public enum Mode: Sendable, CustomStringConvertible {
        case cgroups(AppCgroups)
        case signals(String)

        public var description: String {
            switch self {
            case .cgroups(let cgroups):
                "cgroups: each app in its own cgroup under \(cgroups.root) (frozen, not stopped; ended whole)"
            case .signals(let why): "signals: \(why); apps are stopped with SIGSTOP only when they have no terminal"
            }
        }

        public var cgroups: AppCgroups? {
            if case .cgroups(let cgroups) = self { return cgroups }
            return nil
        }
    }

    /// A supervised process ended.
    public struct Exit: Sendable {
        public var app: AppID
        public var processID: Int32
        /// How it ended, for a process bgd launched (and so reaped); nil for one it was told about.
        public var status: ExitStatus?
        public var launched: Bool

        public init(app: AppID, processID: Int32, status: ExitStatus?, launched: Bool) {
            self.app = app
            self.processID = processID
            self.status = status
            self.launched = launched
        }
    }

    private struct Supervised {
        var app: AppID
        var process: LaunchedProcess
        var launched: Bool
        var control = ProcessControl()
        var cgroup: AppCgroup?
        /// For a process the user started: the cgroup it was in before bgd took it.
        var origin: String?
        /// In signal mode, whether SIGSTOP is safe (a session of its own, no terminal).
        var mayStop: Bool
        /// Whether bgd may signal it at all (same user, not bgd itself).
        var maySignal: Bool
        /// A launched process's log, kept open to bound it while the process lives.
        var log: KeptLog?
    }

    /// The launch log's descriptor bgd holds beside the process's own (and the same file opened
    /// for reading); closed when it is let go.
    private final class KeptLog {
        let descriptor: Int32
        let reader: Int32
        let path: String
        init?(descriptor: Int32, path: String) {
            guard let reader = LaunchLog.reader(of: descriptor, at: path) else {
                close(descriptor)
                return nil
            }
            self.descriptor = descriptor
            self.reader = reader
            self.path = path
        }
        deinit {
            close(descriptor)
            close(reader)
        }
    }

    public let mode: Mode
    private let launcher: any AppLauncher
    private let clock: any WallClock
    private let logger: Logger
    private var processes: [Int32: Supervised] = [:]
    private var exitHandlers: [@Sendable (Exit) async -> Void] = []
    /// CPU time of an app's cgroups already removed, so an app's total only grows.
    private var retiredCPU: [AppID: UInt64] = [:]
    private let timers = Doorbell()
    /// When the running processes' launch logs are next looked at (nil: none is running).
    private var nextLogCheck: Duration?
    private let exitDoorbell = Doorbell()
    private let launches: AsyncStream<LaunchedProcess>
    private let launchContinuation: AsyncStream<LaunchedProcess>.Continuation

    /// How long a process has between SIGTERM and SIGKILL when bgd stops.
    private let killGrace: Duration

    public init(mode: Mode, launcher: any AppLauncher, clock: any WallClock, killGrace: Duration, logger: Logger) {
        self.killGrace = killGrace
        self.mode = mode
        self.launcher = launcher
        self.clock = clock
        self.logger = logger
        (launches, launchContinuation) = AsyncStream<LaunchedProcess>.makeStream()
    }

    /// Called for every supervised process that ends, in the order registered.
    public func onExit(_ handler: @escaping @Sendable (Exit) async -> Void) { exitHandlers.append(handler) }

    // MARK: Processes in

    /// Starts a process for `app` (in its cgroup), supervised from now.
    public func launch(_ spec: LaunchSpec, for app: AppID) throws -> LaunchedProcess {
        var spec = spec
        var cgroup: AppCgroup?
        if let cgroups = mode.cgroups {
            do { cgroup = try cgroups.launched(app) } catch {
                logger.warning(
                    "No cgroup for the app; launching it in bgd's", metadata: ["app.id": "\(app)", "error": "\(error)"])
            }
        }
        spec.cgroup = cgroup
        let log = LaunchLog.descriptor(at: spec.logFile).flatMap { KeptLog(descriptor: $0, path: spec.logFile) }
        spec.logDescriptor = log?.descriptor
        let process: LaunchedProcess
        do {
            process = try launcher.launch(spec)
        } catch {
            if let cgroup, !processes.values.contains(where: { $0.cgroup == cgroup }) { cgroup.remove() }
            throw error
        }
        processes[process.processID] = Supervised(
            app: app, process: process, launched: true, cgroup: cgroup, mayStop: true, maySignal: true, log: log)
        if log != nil && nextLogCheck == nil {
            nextLogCheck = clock.elapsed + LaunchLog.checkInterval
            timers.ring()
        }
        launchContinuation.yield(process)
        return process
    }

    /// Takes on a process the user started, which `app` reported as its own (the kernel vouched
    /// for it: the caller or its descendant). In cgroup mode it moves to a cgroup of its own.
    public func adopt(_ pid: Int32, of app: AppID) {
        if let existing = processes[pid], existing.app == app { return }
        let maySignal = Self.maySignal(pid)
        var supervised = Supervised(
            app: app, process: LaunchedProcess(processID: pid, startTicks: LaunchedProcess.startTicks(of: pid)),
            launched: false,
            mayStop: maySignal && Self.leadsTerminallessSession(pid), maySignal: maySignal)
        if maySignal, let cgroups = mode.cgroups {
            do {
                let group = try cgroups.adopted(app, processID: pid)
                // Started from an app bgd holds (a launcher, a terminal app), where it came from is
                // where that one came from; before, it had no origin and stayed in bgd's group.
                let origin = cgroups.origin(of: pid)
                // Written before the move: a bgd killed right after it leaves what it needs.
                if let origin {
                    cgroups.recordOrigin(
                        origin, memoryOrigin: group.memoryPath == nil ? nil : cgroups.memoryOrigin(of: pid), of: group)
                }
                do {
                    try group.enter(pid)
                } catch {
                    cgroups.forgetOrigin(of: group)
                    throw error
                }
                supervised.cgroup = group
                supervised.origin = origin
            } catch {
                logger.notice(
                    "Cannot move the app's process into a cgroup; signals apply",
                    metadata: ["app.id": "\(app)", "pid": "\(pid)", "error": "\(error)"])
            }
        }
        processes[pid] = supervised
        let startTicks = supervised.process.startTicks
        let clock = self.clock
        Task { [weak self] in
            await ProcessExitWatch.exited(pid, startTicks: startTicks, clock: clock)
            await self?.exited(pid, status: nil)
        }
    }

    // MARK: What bgd does to them

    /// Whether `freeze` would suspend `pid`: in its cgroup, or (signals) a process with no
    /// terminal and a session of its own that is not its terminal's foreground job.
    public func canSuspend(_ pid: Int32) -> Bool {
        guard let supervised = processes[pid], supervised.maySignal, !supervised.control.isEnding else { return false }
        if supervised.cgroup != nil { return true }
        return supervised.mayStop && !AppProcessInfo.isTerminalForeground(pid)
    }

    /// Suspends `pid` (and, in cgroup mode, everything in its cgroup). False when it cannot be.
    public func freeze(_ pid: Int32) -> Bool {
        guard canSuspend(pid), var supervised = processes[pid] else { return false }
        guard supervised.control.freeze() == .freeze else { return supervised.control.phase == .frozen }
        let done = perform(.freeze, on: supervised)
        if done { trimLog(of: supervised) }
        if !done {
            // Half-frozen is worse than not frozen: undone, and the app stays in the background.
            _ = supervised.control.thaw()
            _ = perform(.thaw, on: supervised)
        }
        processes[pid] = supervised
        return done
    }

    public func thaw(_ pid: Int32) {
        guard var supervised = processes[pid] else { return }
        let action = supervised.control.thaw()
        processes[pid] = supervised
        _ = perform(action, on: supervised)
    }

    /// Ends `pid` `after` from now (it was told to exit), SIGKILL `grace` after the SIGTERM.
    public func end(_ pid: Int32, after: Duration, grace: Duration) {
        apply(to: pid) { $0.end(after: after, grace: grace, now: $1) }
    }

    /// SIGTERM now, SIGKILL `killAfter` from now (time that passes, whatever the wall clock does).
    public func terminate(_ pid: Int32, killAfter: Duration) {
        apply(to: pid) { $0.terminate(killAt: $1 + killAfter, now: $1) }
    }

    /// A planned end is off (the process has work again).
    public func spare(_ pid: Int32) {
        apply(to: pid) { control, _ in control.spare() }
    }

    public func kill(_ pid: Int32) {
        apply(to: pid) { control, _ in control.kill() }
    }

    /// Kills every process of `app` bgd launched (the app was unregistered); thaws its others.
    public func endAll(of app: AppID) {
        for (pid, supervised) in processes where supervised.app == app {
            if supervised.launched { kill(pid) } else { thaw(pid) }
        }
    }

    private func apply(to pid: Int32, _ change: (inout ProcessControl, Duration) -> ProcessControl.Action) {
        guard var supervised = processes[pid] else { return }
        let action = change(&supervised.control, clock.elapsed)
        processes[pid] = supervised
        _ = perform(action, on: supervised)
        timers.ring()
    }

    /// Carries an action out, through the cgroup where the process has one.
    private func perform(_ action: ProcessControl.Action, on supervised: Supervised) -> Bool {
        guard supervised.maySignal, action != .none else { return action == .none }
        let pid = supervised.process.processID
        // A process bgd did not launch is not its child: its pid could be another's by now.
        if !supervised.launched, let ticks = supervised.process.startTicks, LaunchedProcess.startTicks(of: pid) != ticks
        {
            return false
        }
        // Launches of one app share its cgroup: while another is in it (a push's launch started as
        // the last run's process lingered on its way out), ending this one is its group's
        // business, or the other would go with it.
        let sharesCgroup =
            supervised.cgroup != nil
            && processes.values.contains { $0.cgroup == supervised.cgroup && $0.process.processID != pid }
        // A launched process leads its own session and group: the group goes with it.
        let target = supervised.launched || getpgid(pid) == pid ? -pid : pid
        if let cgroup = supervised.cgroup, !sharesCgroup {
            switch action {
            case .none: return true
            case .freeze: return cgroup.freeze()
            case .thaw:
                // Stopped by a signal, if it was frozen while another launch shared the cgroup
                // (that one has gone since): before, only the cgroup was thawed, and the process
                // stayed stopped for good — and SIGTERM'd stopped, its handler never ran.
                AppProcessInfo.signal(target, SIGCONT)
                return cgroup.thaw()
            case .terminate:
                cgroup.thaw()
                AppProcessInfo.signal(target, SIGCONT)
                cgroup.signalAll(SIGTERM)
                return true
            case .kill:
                // A launched app's cgroup is the app's alone: all of it goes. A user's process
                // takes what it started since bgd took it on.
                return cgroup.kill(timeout: .milliseconds(500))
            }
        }
        switch action {
        case .none: return true
        case .freeze: return AppProcessInfo.signal(target, SIGSTOP)
        case .thaw: return AppProcessInfo.signal(target, SIGCONT)
        case .terminate:
            AppProcessInfo.signal(target, SIGCONT)
            return AppProcessInfo.signal(target, SIGTERM)
        case .kill: return AppProcessInfo.signal(target, SIGKILL)
        }
    }

    // MARK: Reading

    /// The phase of `pid`'s timeline (nil: not supervised, or gone).
    public func phase(of pid: Int32) -> ProcessControl.Phase? { processes[pid]?.control.phase }

    /// The app whose launched process `pid` is, or descends from; nil for a process bgd did not
    /// launch (the user's own, bgctl).
    public func launchedApp(containing pid: Int32) -> AppID? {
        let launched = processes.filter { $0.value.launched }
        guard !launched.isEmpty else { return nil }
        if let app = ProcessTree.ancestor(of: pid, among: Set(launched.keys)).flatMap({ launched[$0]?.app }) {
            return app
        }
        // A process that left the tree (a daemonised helper) is still in its app's cgroup.
        guard let directory = mode.cgroups?.directory(of: pid) else { return nil }
        return launched.values.first { $0.cgroup?.path == directory }?.app
    }

    /// Whether bgd launched a process for `app` that is not on its way out.
    public func workingProcess(of app: AppID) -> Int32? {
        processes.first { $0.value.app == app && $0.value.launched && !$0.value.control.isEnding }?.key
    }

    /// The app's CPU time so far, all its supervised processes (microseconds; grows only).
    public func cpuMicroseconds(of app: AppID) -> UInt64 {
        var total = retiredCPU[app] ?? 0
        var seen: Set<String> = []
        for supervised in processes.values where supervised.app == app {
            if let cgroup = supervised.cgroup {
                if seen.insert(cgroup.path).inserted { total += cgroup.cpuMicroseconds ?? 0 }
            } else {
                total += AppProcessInfo.cpuMicroseconds(of: supervised.process.processID) ?? 0
            }
        }
        return total
    }

    /// The most memory one of the app's processes (cgroups: one of its groups) held, in bytes.
    public func memoryPeakBytes(of app: AppID) -> UInt64? {
        processes.values.filter { $0.app == app }
            .compactMap { $0.cgroup?.memoryPeakBytes ?? AppProcessInfo.peakResidentBytes(of: $0.process.processID) }
            .max()
    }

    /// A run starts: peak memory counts from here (where the hierarchy can start it over).
    public func startMemoryPeak(of app: AppID) {
        for supervised in processes.values where supervised.app == app { supervised.cgroup?.resetMemoryPeak() }
    }

    // MARK: Exits

    private func exited(_ pid: Int32, status: ExitStatus?) async {
        guard var supervised = processes[pid] else { return }
        let wasFrozen = supervised.control.phase == .frozen
        supervised.control.exited()
        processes[pid] = supervised
        let exit = Exit(app: supervised.app, processID: pid, status: status, launched: supervised.launched)
        for handler in exitHandlers { await handler(exit) }
        processes[pid] = nil
        if supervised.launched {
            if let cgroup = supervised.cgroup {
                // Whatever the app left behind goes with it, unless another launch of it shares the group.
                if !processes.values.contains(where: { $0.cgroup == cgroup }) {
                    retiredCPU[supervised.app, default: 0] += cgroup.cpuMicroseconds ?? 0
                    cgroup.kill(timeout: .milliseconds(500))
                    cgroup.remove()
                }
            } else {
                AppProcessInfo.signal(-pid, SIGKILL)  // whatever the app left behind in its group
            }
        } else if let cgroup = supervised.cgroup {
            // A user's process is gone (the freezer lets SIGKILL through: the OOM killer, kill -9),
            // and what it started stays the user's: thawed, or a group frozen while the app was
            // suspended would hold it stopped as long as bgd runs, and given back the cgroup the
            // process came from, as when bgd stops.
            if cgroup.isPopulated && !processes.values.contains(where: { $0.cgroup == cgroup }) {
                cgroup.thaw()
                if let origin = supervised.origin { mode.cgroups?.giveBack(cgroup, to: origin) }
            }
            let used = cgroup.cpuMicroseconds ?? 0
            if mode.cgroups?.retire(cgroup) == true { retiredCPU[supervised.app, default: 0] += used }
        } else if wasFrozen {
            // Stopped with its process group (SIGSTOP to -pid): the rest of the group goes on.
            AppProcessInfo.signal(-pid, SIGCONT)
        }
        if !processes.values.contains(where: { $0.log != nil }) { nextLogCheck = nil }
        exitDoorbell.ring()
        timers.ring()
    }

    // MARK: Service

    public func run() async throws {
        await withDiscardingTaskGroup { group in
            group.addTask {
                await self.timers.serve(
                    "processes", on: self.clock, logger: self.logger, untilElapsed: { await self.tick() })
                await self.shutDown(graceful: !Task.isCancelled)
                self.launchContinuation.finish()
            }
            // One waiter per launched process; each ends when its process does (and reaps it).
            for await process in launches {
                group.addTask {
                    let status = await self.launcher.waitForExit(process)
                    await self.exited(process.processID, status: status)
                }
            }
        }
    }

    private func tick() -> Duration? {
        let now = clock.elapsed
        var next: Duration?
        for (pid, var supervised) in processes {
            let action = supervised.control.tick(now: now)
            processes[pid] = supervised
            _ = perform(action, on: supervised)
            if let deadline = supervised.control.nextDeadline { next = min(next ?? deadline, deadline) }
        }
        if let check = nextLogCheck {
            if now >= check {
                for supervised in processes.values where supervised.control.phase != .frozen { trimLog(of: supervised) }
                // Only while a process bgd launched lives: an idle bgd has no timer for this.
                nextLogCheck =
                    processes.values.contains { $0.log != nil } ? now + LaunchLog.checkInterval : nil
            }
            if let check = nextLogCheck { next = min(next ?? check, check) }
        }
        return next
    }

    /// Bounds a launched process's log now (see `LaunchLog.keepWithin`).
    private func trimLog(of supervised: Supervised) {
        guard let log = supervised.log,
            LaunchLog.keepWithin(descriptor: log.descriptor, reader: log.reader, path: log.path)
        else { return }
        logger.notice(
            "The app's launch log passed its limit while the app ran; its last part is now launch.log.1",
            metadata: ["app.id": "\(supervised.app)", "pid": "\(supervised.process.processID)"])
    }

    /// bgd is stopping: every process it launched is ended (SIGTERM and the kill grace when
    /// graceful), every process of the user's it froze is thawed and given back its own cgroup.
    private func shutDown(graceful: Bool) async {
        for (pid, supervised) in processes where !supervised.launched {
            thaw(pid)
            // The process and whatever it started go back; the note of where to stays until the
            // group is empty.
            if let cgroup = supervised.cgroup, let origin = supervised.origin {
                mode.cgroups?.giveBack(cgroup, to: origin)
                mode.cgroups?.retire(cgroup)
            }
        }
        let launched = processes.filter { $0.value.launched }.map(\.key)
        for pid in launched {
            if graceful { terminate(pid, killAfter: killGrace) } else { kill(pid) }
        }
        if graceful && !launched.isEmpty {
            let deadline = clock.elapsed + killGrace
            while processes.values.contains(where: \.launched) && clock.elapsed < deadline {
                do { try await exitDoorbell.wait(untilElapsed: deadline, on: clock) } catch { break }
            }
            for pid in launched where processes[pid] != nil { kill(pid) }
        }
        if let cgroups = mode.cgroups {
            for (group, adopted) in cgroups.leftovers() {
                // A user's group whose process exited before its children: they go back too.
                if adopted, let origin = cgroups.recordedOrigin(of: group) { cgroups.giveBack(group, to: origin) }
                cgroups.retire(group)
            }
            cgroups.removeIfEmpty()
        }
    }

    // MARK: Left from before

    /// At start: what a killed bgd left in its cgroups. Launched groups are ended whole (nobody
    /// supervises them; their runs were recorded as interrupted), the user's groups thawed and
    /// their processes given back the cgroups they came from, as a bgd stopping gives them (the
    /// app reports again and is taken on anew). Returns what it ended and thawed.
    public static func reclaimLeftovers(of cgroups: AppCgroups, logger: Logger) -> (ended: Int, thawed: Int) {
        var ended = 0, thawed = 0
        for (group, adopted) in cgroups.leftovers() {
            if adopted {
                if group.isFrozen { thawed += 1 }
                group.thaw()
                if let origin = cgroups.recordedOrigin(of: group) { cgroups.giveBack(group, to: origin) }
                if !group.isPopulated { cgroups.forgetOrigin(of: group) }
            } else if group.isPopulated {
                ended += group.processes.count
                group.kill()
                logger.notice(
                    "Ended app processes a previous bgd left in their cgroup", metadata: ["cgroup": "\(group.path)"])
            }
            if !group.isPopulated { group.remove() }
        }
        return (ended, thawed)
    }

    /// At start, without cgroups: ends the process a killed bgd had launched for a run now
    /// recorded as interrupted — only if the pid still names that process (its start time).
    public static func endOrphan(processID: Int32, startTicks: Int64?) -> Bool {
        guard let startTicks, processID > 1, LaunchedProcess.startTicks(of: processID) == startTicks else {
            return false
        }
        return AppProcessInfo.signal(-processID, SIGKILL)
    }

    /// At start: ends every process still running for one of `runs` (interrupted) that a bgd on
    /// `socketPath` started — found in /proc by the run and socket bgd put in its environment,
    /// which its descendants inherit. Returns the pids it ended; none where /proc is missing.
    public static func endOrphans(ofRuns runs: Set<String>, socketPath: String) -> [Int32] {
        guard !runs.isEmpty, let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc") else {
            return []
        }
        var ended: [Int32] = []
        for entry in entries {
            guard let pid = Int32(entry), pid > 1, pid != getpid(),
                let environment = AppProcessInfo.environment(of: pid),
                environment[LaunchEnvironment.socket] == socketPath,
                let run = environment[LaunchEnvironment.run], runs.contains(run)
            else { continue }
            if AppProcessInfo.signal(getpgid(pid) == pid ? -pid : pid, SIGKILL) { ended.append(pid) }
        }
        return ended
    }

    /// At start: continues a process a killed bgd had suspended (this store says so), if it is
    /// still that process — stopped with SIGSTOP, or frozen in an app cgroup of a bgd's.
    /// `reclaimLeftovers` thaws those it finds under this bgd's own cgroup; one started elsewhere
    /// (from another terminal's scope, with `--app-cgroups off`, or the state directory spelled
    /// otherwise) finds none, and the app stayed frozen for good.
    public static func continueLeftover(_ leftover: SuspendedProcess) -> Bool {
        let pid = leftover.processID
        guard pid > 1, pid != getpid(), LaunchedProcess.startTicks(of: pid) == leftover.startTicks else { return false }
        AppCgroups.appGroup(of: pid)?.thaw()
        return AppProcessInfo.signal(getpgid(pid) == pid ? -pid : pid, SIGCONT)
    }

    // MARK: Process facts

    private static func maySignal(_ pid: Int32) -> Bool {
        guard pid > 1, pid != getpid(), AppProcessInfo.signal(pid, 0) else { return false }
        #if os(Linux)
            var info = stat()
            guard stat("/proc/\(pid)", &info) == 0, info.st_uid == getuid() else { return false }
        #endif
        return true
    }

    /// Whether `pid` leads a session of its own and has no controlling terminal.
    static func leadsTerminallessSession(_ pid: Int32) -> Bool {
        // After the name: state, ppid, pgrp, session, tty_nr.
        guard let fields = ProcStat.fields(of: pid), fields.count > 4, let session = Int32(fields[3]),
            let terminal = Int64(fields[4])
        else { return false }
        return session == pid && terminal == 0
    }
}
