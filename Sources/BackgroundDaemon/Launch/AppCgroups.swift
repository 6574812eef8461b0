import BackgroundModel
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The cgroup v2 subtree where bgd keeps its apps: `<bgd's own cgroup>/bgd-<instance>/apps/`.
///
/// Each app bgd launches lives in `apps/<app-id>/` — the process and everything it starts, with
/// no way out by forking or `setsid` — and each app process the user started and reported in
/// `apps/<app-id>@<pid>/`, so that a leftover launched group can be ended whole at the next
/// start without touching a process of the user's. Suspension is the kernel's freezer (no
/// signal, so no shell sees a `Stopped` job), ending is `cgroup.kill`, and `cpu.stat` says
/// what each app used. The instance part keeps two bgds with different state directories in
/// the same cgroup (tests; a user running two) apart; under systemd bgd's own cgroup is its
/// service's, delegated to it (`Delegate=yes`).
public struct AppCgroups: Sendable {
    /// `…/bgd-<instance>/apps` in the unified hierarchy.
    public let root: String
    /// Where the unified hierarchy is mounted.
    public let mount: String
    /// The same place in the v1 memory hierarchy, where only v1 has the memory controller
    /// (hybrid mode): peak memory per app. Nil where v2 has it or nothing does.
    public let memoryRoot: String?
    /// Where the v1 memory hierarchy is mounted, when `memoryRoot` is set.
    public let memoryMount: String?
    /// Where the cgroup each of the user's processes came from is written, one file per group
    /// bgd moved one into (`<state-dir>/cgroup-origins/<app>@<pid>`): a bgd killed before it gave
    /// them back leaves the next one what it needs to.
    public let originsDirectory: String?

    /// Where bgd runs its apps, or why it cannot (said once at start and in `bgctl status`).
    public enum Discovery: Sendable {
        case available(AppCgroups)
        case unavailable(String)
    }

    /// Finds bgd's own cgroup and makes the app subtree under it; `origins` is where the user's
    /// processes' own cgroups are remembered (see `originsDirectory`).
    public static func discover(instance: String, origins: String? = nil) -> Discovery {
        #if os(Linux)
            guard let mounts = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8),
                let membership = try? String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8)
            else { return .unavailable("/proc has no cgroup information") }
            guard let unified = mountPoint(in: mounts, type: "cgroup2", option: nil),
                let own = path(in: membership, controller: "")
            else { return .unavailable("no cgroup v2 (unified) hierarchy is mounted") }
            let base = unified + (own == "/" ? "" : own) + "/bgd-\(instance)"
            let root = base + "/apps"
            guard makeDirectory(base), makeDirectory(root) else {
                let reason = String(cString: strerror(errno))
                return .unavailable(
                    "cannot create \(root): \(reason) (bgd needs its cgroup delegated: `bgctl install-service` writes Delegate=yes)"
                )
            }
            guard access(root + "/cgroup.procs", W_OK) == 0 else {
                return .unavailable("\(root)/cgroup.procs is not writable")
            }
            guard access(root + "/cgroup.freeze", F_OK) == 0, access(root + "/cgroup.kill", F_OK) == 0 else {
                rmdir(root)
                rmdir(base)
                return .unavailable("this kernel's cgroups have no freezer or kill (Linux 5.14+ has both)")
            }
            var memoryRoot: String?
            var memoryMount: String?
            if access(root + "/memory.peak", F_OK) != 0,
                let v1 = mountPoint(in: mounts, type: "cgroup", option: "memory"),
                let ownMemory = path(in: membership, controller: "memory")
            {
                let memoryBase = v1 + (ownMemory == "/" ? "" : ownMemory) + "/bgd-\(instance)"
                if makeDirectory(memoryBase), makeDirectory(memoryBase + "/apps") {
                    memoryRoot = memoryBase + "/apps"
                    memoryMount = v1
                }
            }
            return .available(
                AppCgroups(
                    root: root, mount: unified, memoryRoot: memoryRoot, memoryMount: memoryMount,
                    originsDirectory: origins))
        #else
            return .unavailable("cgroups are Linux's")
        #endif
    }

    /// The app group of any bgd's (`…/bgd-<instance>/apps/<group>`) that `pid` is in, wherever
    /// that bgd's tree is — found without one of its own (a bgd started elsewhere, or without
    /// cgroups, continuing what a killed one left); nil when the process is in none.
    public static func appGroup(of pid: Int32) -> AppCgroup? {
        #if os(Linux)
            guard let mounts = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8),
                let unified = mountPoint(in: mounts, type: "cgroup2", option: nil),
                let membership = try? String(contentsOfFile: "/proc/\(pid)/cgroup", encoding: .utf8),
                let path = path(in: membership, controller: "")
            else { return nil }
            let parts = path.split(separator: "/")
            guard parts.count >= 3, parts[parts.count - 3].hasPrefix("bgd-"), parts[parts.count - 2] == "apps" else {
                return nil
            }
            return AppCgroup(path: unified + path, memoryPath: nil)
        #else
            return nil
        #endif
    }

    /// The cgroup directory `pid` is in (in this hierarchy), nil when it is gone.
    public func directory(of pid: Int32) -> String? {
        guard let membership = try? String(contentsOfFile: "/proc/\(pid)/cgroup", encoding: .utf8),
            let path = Self.path(in: membership, controller: "")
        else { return nil }
        return mount + (path == "/" ? "" : path)
    }

    /// The v1 memory cgroup directory `pid` is in, where bgd measures memory there (hybrid mode).
    public func memoryDirectory(of pid: Int32) -> String? {
        guard let memoryMount,
            let membership = try? String(contentsOfFile: "/proc/\(pid)/cgroup", encoding: .utf8),
            let path = Self.path(in: membership, controller: "memory")
        else { return nil }
        return memoryMount + (path == "/" ? "" : path)
    }

    /// Where the user's process `pid` came from: its cgroup, or — still in one of bgd's (the
    /// one a killed bgd moved it into, or the group of a held app it was started from) — what
    /// was written down for that group.
    public func origin(of pid: Int32) -> String? {
        guard let directory = directory(of: pid) else { return nil }
        return contains(directory) ? recordedOrigin(of: AppCgroup(path: directory, memoryPath: nil)) : directory
    }

    /// The same in the v1 memory hierarchy.
    public func memoryOrigin(of pid: Int32) -> String? {
        guard let directory = memoryDirectory(of: pid) else { return nil }
        guard let memoryRoot, directory.hasPrefix(memoryRoot + "/") else { return directory }
        let name = (directory as NSString).lastPathComponent
        return recordedMemoryOrigin(of: AppCgroup(path: root + "/" + name, memoryPath: nil))
    }

    /// A short, stable name for the state directory (the same bgd finds its leftovers again).
    public static func instance(of stateDirectory: String) -> String {
        String(StableHash.fnv1a(stateDirectory) & 0xffff_ffff, radix: 16)
    }

    /// The group for processes bgd launches for `app`, made if missing.
    public func launched(_ app: AppID) throws -> AppCgroup { try group(named: app.rawValue) }

    /// The group for the user's process `pid` of `app`, made if missing.
    public func adopted(_ app: AppID, processID: Int32) throws -> AppCgroup {
        try group(named: "\(app.rawValue)@\(processID)")
    }

    private func group(named name: String) throws -> AppCgroup {
        let group = AppCgroup(path: root + "/" + name, memoryPath: memoryRoot.map { $0 + "/" + name })
        guard Self.makeDirectory(group.path) else { throw AppCgroup.Failure(path: group.path, errno: errno) }
        if let memory = group.memoryPath, !Self.makeDirectory(memory) {
            return AppCgroup(path: group.path, memoryPath: nil)
        }
        return group
    }

    /// Remembers the cgroup the user's process in `group` came from (until `forgetOrigin`), and
    /// its v1 memory group where bgd moves it in that hierarchy too.
    public func recordOrigin(_ origin: String, memoryOrigin: String? = nil, of group: AppCgroup) {
        guard let file = originFile(of: group), let directory = originsDirectory else { return }
        try? FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        try? Data(origin.utf8).write(to: URL(fileURLWithPath: file), options: .atomic)
        if let memoryOrigin {
            try? Data(memoryOrigin.utf8).write(to: URL(fileURLWithPath: file + ".memory"), options: .atomic)
        }
    }

    /// Where in the v1 memory hierarchy the user's process in `group` came from, if written down
    /// and still there, as `recordedOrigin` checks.
    public func recordedMemoryOrigin(of group: AppCgroup) -> String? {
        guard let memoryMount, let memoryRoot else { return nil }
        return Self.recorded(in: originFile(of: group).map { $0 + ".memory" }, under: memoryMount, outside: memoryRoot)
    }

    /// Moves every process in the user's `group` back where it came from: `origin`, and its
    /// recorded v1 memory group (hybrid mode). Before, they stayed in bgd's v1 memory group —
    /// out of their own memory limits, and one directory there leaked per adoption.
    public func giveBack(_ group: AppCgroup, to origin: String) {
        group.releaseAll(to: origin, memoryOrigin: recordedMemoryOrigin(of: group))
    }

    /// Where the user's process in `group` came from, if bgd wrote it down and it is still there
    /// — a cgroup in this hierarchy outside bgd's own groups, nothing else (the file is read back
    /// from disk: a process is never written anywhere else on its say).
    public func recordedOrigin(of group: AppCgroup) -> String? {
        Self.recorded(in: originFile(of: group), under: mount, outside: root)
    }

    /// The cgroup written in `file`, if it is one under `mount`, outside bgd's own `groups`, and
    /// still there to take processes.
    private static func recorded(in file: String?, under mount: String, outside groups: String) -> String? {
        guard let file, let origin = try? String(contentsOfFile: file, encoding: .utf8), !origin.isEmpty,
            origin == mount || origin.hasPrefix(mount + "/"),
            !origin.split(separator: "/").contains(".."), !origin.hasPrefix(groups + "/"), origin != groups,
            access(origin + "/cgroup.procs", W_OK) == 0
        else { return nil }
        return origin
    }

    public func forgetOrigin(of group: AppCgroup) {
        if let file = originFile(of: group) {
            unlink(file)
            unlink(file + ".memory")
        }
    }

    /// Removes a user's group once nothing is in it, with the note of where its processes came
    /// from; false while something is.
    @discardableResult
    public func retire(_ group: AppCgroup) -> Bool {
        guard !group.isPopulated else { return false }
        group.remove()
        forgetOrigin(of: group)
        return true
    }

    private func originFile(of group: AppCgroup) -> String? {
        originsDirectory.map { $0 + "/" + (group.path as NSString).lastPathComponent }
    }

    /// Whether `directory` is one of bgd's own groups (a process in one is not where it came from).
    public func contains(_ directory: String) -> Bool { directory.hasPrefix(root + "/") }

    /// Every group a previous bgd left: launched ones (`adopted == false`) and the user's.
    public func leftovers() -> [(group: AppCgroup, adopted: Bool)] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: root)) ?? []
        return names.sorted().compactMap { name in
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: root + "/" + name, isDirectory: &isDirectory),
                isDirectory.boolValue
            else { return nil }
            return (
                AppCgroup(path: root + "/" + name, memoryPath: memoryRoot.map { $0 + "/" + name }), name.contains("@")
            )
        }
    }

    /// Removes the subtree if nothing is left in it (bgd stopping).
    public func removeIfEmpty() {
        for root in [root] + (memoryRoot.map { [$0] } ?? []) {
            rmdir(root)
            rmdir((root as NSString).deletingLastPathComponent)
        }
    }

    /// Makes the directory, or finds it made. What is there already must be a directory: for an
    /// app whose id is the name of one of the cgroup's own files (`cgroup.procs`, `cpu.stat`),
    /// that file was taken for its group, and its processes were never placed in one (ENOTDIR
    /// now, and the launch fails saying so).
    static func makeDirectory(_ path: String) -> Bool {
        if mkdir(path, 0o755) == 0 { return true }
        guard errno == EEXIST else { return false }
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue {
            return true
        }
        errno = ENOTDIR
        return false
    }

    /// The mount point of the first mount of `type` (with `option` among its super options).
    static func mountPoint(in mountInfo: String, type: String, option: String?) -> String? {
        for line in mountInfo.split(separator: "\n") {
            // id parent major:minor root mount-point options [optional…] - type source super-options
            let halves = line.components(separatedBy: " - ")
            guard halves.count == 2 else { continue }
            let before = halves[0].split(separator: " "), after = halves[1].split(separator: " ")
            guard before.count >= 5, after.count >= 3, after[0] == type else { continue }
            if let option, !after[2].split(separator: ",").contains(Substring(option)) { continue }
            return String(before[4]).replacingOccurrences(of: "\\040", with: " ")
        }
        return nil
    }

    /// bgd's cgroup in the hierarchy of `controller` ("" for v2's unified one).
    static func path(in membership: String, controller: String) -> String? {
        for line in membership.split(separator: "\n") {
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3 else { continue }
            if controller.isEmpty
                ? fields[0] == "0" && fields[1].isEmpty
                : fields[1].split(separator: ",").contains(Substring(controller))
            {
                return String(fields[2])
            }
        }
        return nil
    }
}

/// One app's cgroup: its processes, frozen or not, what they used.
public struct AppCgroup: Sendable, Hashable {
    public let path: String
    /// Its twin in the v1 memory hierarchy, when peak memory is measured there.
    public let memoryPath: String?

    public struct Failure: Error, CustomStringConvertible {
        public var path: String
        public var errno: Int32
        public var description: String { "cgroup \(path): \(String(cString: strerror(errno)))" }
    }

    /// What `bgd-confine --cgroup` writes its own pid into before it execs the app.
    public var procsFiles: [String] { [path + "/cgroup.procs"] + (memoryPath.map { [$0 + "/cgroup.procs"] } ?? []) }

    /// Moves `pid` (a process already running) in.
    public func enter(_ pid: Int32) throws {
        for file in procsFiles {
            guard Self.write("\(pid)", to: file) else {
                if file == procsFiles[0] { throw Failure(path: path, errno: errno) }
                continue  // no peak memory for it; everything else holds
            }
        }
    }

    /// Moves `pid` back to the group it came from (bgd stopping: nothing of it stays around the
    /// user's process). False where that group is gone or refuses.
    public func release(_ pid: Int32, to origin: String) -> Bool { Self.write("\(pid)", to: origin + "/cgroup.procs") }

    /// Moves every process in it back to `origin`, and in its v1 memory twin back to
    /// `memoryOrigin` (those that may not go stay).
    public func releaseAll(to origin: String, memoryOrigin: String? = nil) {
        for pid in processes { _ = release(pid, to: origin) }
        guard let memoryPath, let memoryOrigin else { return }
        for pid in Self.processes(in: memoryPath) { _ = release(pid, to: memoryOrigin) }
    }

    public var processes: [Int32] { Self.processes(in: path) }

    static func processes(in directory: String) -> [Int32] {
        ((try? String(contentsOfFile: directory + "/cgroup.procs", encoding: .utf8)) ?? "").split(separator: "\n")
            .compactMap { Int32($0) }
    }

    /// Freezes every process and waits (up to `timeout`) until the kernel says they all are.
    @discardableResult
    public func freeze(timeout: Duration = .seconds(1)) -> Bool {
        guard Self.write("1", to: path + "/cgroup.freeze") else { return false }
        return waitForEvent("frozen", value: "1", timeout: timeout)
    }

    @discardableResult
    public func thaw() -> Bool { Self.write("0", to: path + "/cgroup.freeze") }

    /// Whether the kernel has every process in it frozen.
    public var isFrozen: Bool { event("frozen") == "1" }
    /// Whether any process is in it.
    public var isPopulated: Bool { event("populated") == "1" }

    /// SIGTERM (or any signal) to every process in it — the app and everything it started.
    public func signalAll(_ signal: Int32) {
        for pid in processes { _ = posixKill(pid, signal) }
    }

    /// Kills every process in it (`cgroup.kill`: no fork can escape), and waits until it is
    /// empty (up to `timeout`). Where `cgroup.kill` is refused, SIGKILL to every pid it lists.
    @discardableResult
    public func kill(timeout: Duration = .seconds(2)) -> Bool {
        if !Self.write("1", to: path + "/cgroup.kill") { signalAll(SIGKILL) }
        thaw()  // a frozen process dies only once thawed on older kernels
        return waitForEvent("populated", value: "0", timeout: timeout)
    }

    /// Its processes' CPU time so far (user + system), in microseconds.
    public var cpuMicroseconds: UInt64? {
        guard let stat = try? String(contentsOfFile: path + "/cpu.stat", encoding: .utf8) else { return nil }
        for line in stat.split(separator: "\n") where line.hasPrefix("usage_usec ") {
            return UInt64(line.dropFirst("usage_usec ".count))
        }
        return nil
    }

    /// The most memory its processes held at once since it was made (or since `resetMemoryPeak`).
    public var memoryPeakBytes: UInt64? {
        let file = memoryPath.map { $0 + "/memory.max_usage_in_bytes" } ?? path + "/memory.peak"
        return (try? String(contentsOfFile: file, encoding: .utf8)).flatMap {
            UInt64($0.trimmingCharacters(in: .whitespacesAndNewlines))
        }
    }

    /// Starts the peak over (v1 only; v2's `memory.peak` counts from the group's making).
    public func resetMemoryPeak() {
        if let memoryPath { _ = Self.write("0", to: memoryPath + "/memory.max_usage_in_bytes") }
    }

    /// Removes the group; false while a process is still in it.
    @discardableResult
    public func remove() -> Bool {
        if let memoryPath { rmdir(memoryPath) }
        return rmdir(path) == 0 || errno == ENOENT
    }

    private func event(_ key: String) -> String? {
        guard let events = try? String(contentsOfFile: path + "/cgroup.events", encoding: .utf8) else { return nil }
        for line in events.split(separator: "\n") where line.hasPrefix(key + " ") {
            return String(line.dropFirst(key.count + 1))
        }
        return nil
    }

    /// Waits for `cgroup.events` to say `key value`: the kernel wakes poll(2) on the file when it
    /// changes (no timer, no spinning; the file is read again through the same descriptor, which
    /// re-arms the notification). `timeout` bounds the wait when it never does.
    private func waitForEvent(_ key: String, value: String, timeout: Duration) -> Bool {
        let descriptor = open(path + "/cgroup.events", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return event(key) == value }
        defer { close(descriptor) }
        var remaining = Int32(
            timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        while true {
            var buffer = [UInt8](repeating: 0, count: 512)
            lseek(descriptor, 0, SEEK_SET)
            let count = read(descriptor, &buffer, buffer.count)
            guard count > 0 else { return event(key) == value }
            let text = String(decoding: buffer[..<count], as: UTF8.self)
            if text.split(separator: "\n").contains(Substring("\(key) \(value)")) { return true }
            guard remaining > 0 else { return false }
            var poller = pollfd(fd: descriptor, events: Int16(POLLPRI), revents: 0)
            // Only a wait that timed out counts against the bound; a notification is a change
            // to look at.
            if poll(&poller, 1, min(remaining, 100)) == 0 { remaining -= min(remaining, 100) }
        }
    }

    static func write(_ text: String, to file: String) -> Bool {
        let descriptor = open(file, O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return false }
        defer { close(descriptor) }
        return text.withCString { posixWrite(descriptor, $0, strlen($0)) } >= 0
    }
}

// The struct's own `kill` and `write` hide the C functions inside it.
private func posixKill(_ pid: Int32, _ signal: Int32) -> Int32 { kill(pid, signal) }
private func posixWrite(_ descriptor: Int32, _ bytes: UnsafePointer<CChar>, _ count: Int) -> Int {
    write(descriptor, bytes, count)
}
