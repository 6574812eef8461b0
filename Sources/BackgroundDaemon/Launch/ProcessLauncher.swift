import BackgroundModel
import Foundation
import QuietThreads

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What to start: argv, environment, working directory, and where its output goes.
public struct LaunchSpec: Sendable {
    public var command: LaunchCommand
    public var environment: [String: String]
    public var workingDirectory: String
    /// stdout and stderr are appended here; stdin is /dev/null.
    public var logFile: String
    /// `logFile` already opened (`LaunchLog.descriptor`) by a caller that keeps it to bound the
    /// log while the process lives (`ProcessSupervisor`); it stays the caller's to close. Nil: the
    /// launcher opens the log itself.
    public var logDescriptor: Int32?
    /// What the process may touch, where the launcher can enforce it; nil: unconfined.
    public var confinement: Confinement?
    /// The cgroup the process starts in (nil: bgd's own).
    public var cgroup: AppCgroup?

    public init(
        command: LaunchCommand, environment: [String: String], workingDirectory: String, logFile: String,
        confinement: Confinement? = nil,
        cgroup: AppCgroup? = nil
    ) {
        self.confinement = confinement
        self.cgroup = cgroup
        self.command = command
        self.environment = environment
        self.workingDirectory = workingDirectory
        self.logFile = logFile
    }
}

/// Starts app processes and waits for them. A protocol so that the coordinator's tests record
/// launches instead (`RunCoordinatorTests.RecordingLauncher`); the daemon uses `ProcessLauncher`.
public protocol AppLauncher: Sendable {
    func launch(_ spec: LaunchSpec) throws -> LaunchedProcess
    /// Returns when `process` has ended, with how (reaping it).
    func waitForExit(_ process: LaunchedProcess) async -> ExitStatus
}

extension AppLauncher {
    public func waitForExit(_ process: LaunchedProcess) async -> ExitStatus { await process.waitForExit() }
}

/// Starts each app in a session and process group of its own with `posix_spawn`, so bgd can signal the app and
/// everything it started at once, and resets the signal dispositions bgd itself changed
/// (ServiceLifecycle ignores SIGTERM/SIGINT to catch them; a child must not inherit that).
public struct ProcessLauncher: AppLauncher {
    /// `bgd-confine`, which puts the process in its cgroup and confines it (see `Confinement`)
    /// before it execs the app.
    public let helper: String?

    public init(helper: String? = nil) { self.helper = helper }

    public struct Failure: Error, CustomStringConvertible {
        public var program: String
        public var errno: Int32
        public var description: String { "cannot start \(program): \(String(cString: strerror(errno)))" }
    }

    public func launch(_ spec: LaunchSpec) throws -> LaunchedProcess {
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }

        var defaults = sigset_t()
        sigemptyset(&defaults)
        for signal in [SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGPIPE, SIGCHLD, SIGUSR1, SIGUSR2] {
            sigaddset(&defaults, signal)
        }
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        var mask = sigset_t()
        sigemptyset(&mask)
        posix_spawnattr_setsigmask(&attributes, &mask)
        // A session of its own (so also a group of its own, led by it): no controlling terminal,
        // no shell's job control to fight over it.
        posix_spawnattr_setflags(&attributes, Int16(Self.setSession | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK))

        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        // Opened here, not by path in the child: what the app left at the path must lead nowhere.
        let opened = spec.logDescriptor == nil ? LaunchLog.descriptor(at: spec.logFile) : nil
        defer { if let opened { close(opened) } }
        let log = spec.logDescriptor ?? opened
        if let log {
            posix_spawn_file_actions_adddup2(&actions, log, 1)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        }
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        addChangeDirectory(&actions, spec.workingDirectory)
        // Nothing of bgd's leaks into the app: its sockets, its database, pipes of its parent.
        closeDescriptors(from: 3, &actions)

        // In a cgroup or confined: the helper enters the app's cgroup and Landlock, then execs the
        // app (same pid, same group).
        var arguments = spec.command.arguments
        var program = spec.command.program
        var helperArguments = (spec.cgroup?.procsFiles ?? []).flatMap { ["--cgroup", $0] }
        if helper != nil, let confinement = spec.confinement { helperArguments += confinement.helperArguments() }
        if let helper, !helperArguments.isEmpty {
            // The helper would start, and only its exec fail: say "cannot start" as without it.
            guard Self.isExecutable(spec.command.program, path: spec.environment["PATH"]) else {
                throw Failure(program: spec.command.program, errno: ENOENT)
            }
            arguments = [helper] + helperArguments + ["--"] + arguments
            program = helper
        }
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = spec.environment.sorted { $0.key < $1.key }.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var pid: pid_t = 0
        let result = posix_spawnp(&pid, program, &actions, &attributes, argv, envp)
        guard result == 0 else { throw Failure(program: spec.command.program, errno: result) }
        if helper == nil, let cgroup = spec.cgroup {
            // No helper to start it inside: moved at once (what it forked meanwhile stays out).
            try? cgroup.enter(pid)
        }
        return LaunchedProcess(processID: pid, startTicks: LaunchedProcess.startTicks(of: pid))
    }

    #if os(Linux)
        /// glibc's POSIX_SPAWN_SETSID (2.26+), which Swift's Glibc module does not carry.
        static let setSession: Int32 = 0x80
    #else
        static let setSession: Int32 = POSIX_SPAWN_SETPGROUP
    #endif

    /// Whether `program` names an executable file, directly or on `PATH`.
    public static func isExecutable(
        _ program: String, path: String? = ProcessInfo.processInfo.environment["PATH"]
    ) -> Bool {
        if program.contains("/") { return access(program, X_OK) == 0 && !isDirectory(program) }
        for directory in (path ?? "/usr/bin:/bin").split(separator: ":") {
            let candidate = "\(directory)/\(program)"
            if access(candidate, X_OK) == 0 && !isDirectory(candidate) { return true }
        }
        return false
    }

    private static func isDirectory(_ path: String) -> Bool {
        var isDirectory: ObjCBool = false
        return FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) && isDirectory.boolValue
    }
}

/// A process bgd started, leader of its own process group.
public struct LaunchedProcess: Hashable, Sendable {
    public let processID: Int32
    /// The kernel's start time of the process (`/proc/<pid>/stat`, field 22), so that a restarted
    /// bgd never signals an unrelated process that happens to reuse the pid.
    public let startTicks: Int64?

    public init(processID: Int32, startTicks: Int64?) {
        self.processID = processID
        self.startTicks = startTicks
    }

    /// Sends `signal` to the whole process group. Returns false when no process is left in it.
    @discardableResult
    public func signalGroup(_ signal: Int32) -> Bool { killpg(processID, signal) == 0 }

    /// Waits for the leader to exit and reaps it. Call once per process.
    ///
    /// The kernel says when it exits: its pidfd joins those the one `PidfdWatcher` thread polls,
    /// so a process that lives for days (an app suspended between runs) holds no thread; the
    /// reap after that does not block. Where there is no pidfd, `waitpid` blocks on a thread of
    /// its own, which ends with the process.
    public func waitForExit() async -> ExitStatus {
        let pid = processID
        if await ProcessExitWatch.exitedChild(pid) {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            return ExitStatus(waitStatus: status)
        }
        return await withCheckedContinuation { continuation in
            NamedThread.start("bgd-wait-\(pid)") {
                var status: Int32 = 0
                while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
                continuation.resume(returning: ExitStatus(waitStatus: status))
            }
        }
    }

    /// The start time of `pid`, or nil where `/proc` is not available or the process is gone.
    public static func startTicks(of pid: Int32) -> Int64? {
        // starttime is field 22.
        guard let fields = ProcStat.fields(of: pid), fields.count > 19 else { return nil }
        return Int64(fields[19])
    }
}

#if canImport(Glibc)
    // glibc has had this since 2.29, but declares it only under _GNU_SOURCE, which Swift's
    // Glibc module does not define; the C symbol is there.
    @_silgen_name("posix_spawn_file_actions_addchdir_np")
    private func spawnFileActionsAddChdir(
        _ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ path: UnsafePointer<CChar>
    ) -> Int32

    private func addChangeDirectory(_ actions: inout posix_spawn_file_actions_t, _ path: String) {
        _ = spawnFileActionsAddChdir(&actions, path)
    }

    // glibc 2.34+, same story as above.
    @_silgen_name("posix_spawn_file_actions_addclosefrom_np")
    private func spawnFileActionsAddClosefrom(
        _ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32
    ) -> Int32

    private func closeDescriptors(from first: Int32, _ actions: inout posix_spawn_file_actions_t) {
        _ = spawnFileActionsAddClosefrom(&actions, first)
    }
#else
    // Darwin: every descriptor bgd opens is close-on-exec (SQLite, NIO, the lock file).
    private func closeDescriptors(from first: Int32, _ actions: inout posix_spawn_file_actions_t) {}

    private func addChangeDirectory(_ actions: inout posix_spawn_file_actions_t, _ path: String) {
        _ = posix_spawn_file_actions_addchdir_np(&actions, path)
    }
#endif
