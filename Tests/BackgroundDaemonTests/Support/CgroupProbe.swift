import BackgroundDaemon
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// What the kernel says about a process's cgroup v2, read the way an operator would (/proc, the
/// cgroup files), independently of bgd's own code.
enum CgroupProbe {
    /// Where the unified hierarchy is mounted (nil: no cgroup v2).
    static let unifiedMount: String? = {
        guard let mounts = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return nil }
        for line in mounts.split(separator: "\n") {
            let halves = line.components(separatedBy: " - ")
            guard halves.count == 2, halves[1].hasPrefix("cgroup2 ") else { continue }
            let fields = halves[0].split(separator: " ")
            if fields.count >= 5 { return String(fields[4]) }
        }
        return nil
    }()

    /// Whether bgd may make cgroups here (root, a writable unified hierarchy with a freezer).
    static var available: Bool {
        guard let mount = unifiedMount else { return false }
        return getuid() == 0 && access(mount, W_OK) == 0 && access("/proc/self/cgroup", R_OK) == 0
    }

    /// The cgroup directory `pid` is in.
    static func directory(of pid: Int32) -> String? {
        guard let mount = unifiedMount,
            let membership = try? String(contentsOfFile: "/proc/\(pid)/cgroup", encoding: .utf8)
        else { return nil }
        for line in membership.split(separator: "\n") where line.hasPrefix("0::") {
            let path = String(line.dropFirst(3))
            return mount + (path == "/" ? "" : path)
        }
        return nil
    }

    static func event(_ key: String, of directory: String) -> String? {
        guard let events = try? String(contentsOfFile: directory + "/cgroup.events", encoding: .utf8) else {
            return nil
        }
        return events.split(separator: "\n").first { $0.hasPrefix(key + " ") }.map {
            String($0.dropFirst(key.count + 1))
        }
    }

    /// Whether `pid`'s cgroup is frozen (the kernel's freezer, not SIGSTOP).
    static func isFrozen(_ pid: Int32) -> Bool {
        directory(of: pid).flatMap { event("frozen", of: $0) } == "1"
    }

    /// `pid`'s cgroup's CPU time so far.
    static func cpuMicroseconds(of pid: Int32) -> UInt64? {
        guard let directory = directory(of: pid),
            let stat = try? String(contentsOfFile: directory + "/cpu.stat", encoding: .utf8)
        else { return nil }
        return stat.split(separator: "\n").first { $0.hasPrefix("usage_usec ") }.flatMap {
            UInt64($0.dropFirst("usage_usec ".count))
        }
    }
}

extension CgroupProbe {
    /// State directories of the bgds the tests started, whose cgroups are looked at when the
    /// test run ends.
    private static let stateDirectories = Mutex<Set<String>>([])

    /// Has `removeLeftovers` run for `stateDirectory` when the test process exits. A bgd that
    /// stops gracefully removes its own groups; one a test kills with SIGKILL cannot, and
    /// hundreds of tests would otherwise leave hundreds of empty groups — and any app such a bgd
    /// had launched still running — on the machine.
    static func removeLeftoversAtExit(ofStateDirectory stateDirectory: String) {
        let first = stateDirectories.withLock { directories in
            defer { directories.insert(stateDirectory) }
            return directories.isEmpty
        }
        if first {
            atexit {
                for directory in CgroupProbe.stateDirectories.withLock({ $0 }) {
                    CgroupProbe.removeLeftovers(ofStateDirectory: directory)
                }
            }
        }
    }

    /// Removes what a killed bgd on `stateDirectory` left in the test's cgroup: its
    /// `bgd-<instance>` subtree (in the unified and the v1 memory hierarchy), each app group in
    /// it ended first.
    static func removeLeftovers(ofStateDirectory stateDirectory: String) {
        guard available, let own = directory(of: getpid()) else { return }
        // Not while a bgd holds the directory (its groups are its own); a directory the test
        // removed has no bgd.
        let lock = open(stateDirectory + "/bgd.lock", O_RDWR | O_CLOEXEC)
        guard lock >= 0 || errno == ENOENT else { return }
        defer { if lock >= 0 { close(lock) } }
        guard lock < 0 || flock(lock, LOCK_EX | LOCK_NB) == 0 else { return }
        let name = "bgd-" + AppCgroups.instance(of: stateDirectory)
        var bases = [own + "/" + name]
        if let ownMemory = memoryDirectory(of: getpid()) { bases.append(ownMemory + "/" + name) }
        for base in bases { removeTree(base) }
    }

    /// Depth first: each group's processes killed (`cgroup.kill`, v2 only), then the directory.
    private static func removeTree(_ path: String) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        for name in names {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: path + "/" + name, isDirectory: &isDirectory),
                isDirectory.boolValue
            {
                removeTree(path + "/" + name)
            }
        }
        if let killer = FileHandle(forWritingAtPath: path + "/cgroup.kill") {
            try? killer.write(contentsOf: Data("1".utf8))
            try? killer.close()
            _ = waitUntilEmpty(path)
        }
        rmdir(path)
    }

    /// Waits (bounded) until the kernel says no process is left in the group.
    private static func waitUntilEmpty(_ path: String) -> Bool {
        let descriptor = open(path + "/cgroup.events", O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return true }
        defer { close(descriptor) }
        for _ in 0..<50 {
            if event("populated", of: path) != "1" { return true }
            var poller = pollfd(fd: descriptor, events: Int16(POLLPRI), revents: 0)
            _ = poll(&poller, 1, 100)
        }
        return false
    }

    /// `pid`'s group in the v1 memory hierarchy, where hybrid mode keeps that controller.
    static func memoryDirectory(of pid: Int32) -> String? {
        guard let membership = try? String(contentsOfFile: "/proc/\(pid)/cgroup", encoding: .utf8) else { return nil }
        for line in membership.split(separator: "\n") {
            let fields = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
            guard fields.count == 3, fields[1].split(separator: ",").contains("memory") else { continue }
            let path = String(fields[2])
            let mount = "/sys/fs/cgroup/memory"
            guard access(mount, F_OK) == 0 else { return nil }
            return mount + (path == "/" ? "" : path)
        }
        return nil
    }
}

/// Whether bgd has `pid` suspended: frozen in its cgroup, or stopped by SIGSTOP.
func isSuspended(_ pid: Int32) -> Bool {
    CgroupProbe.isFrozen(pid) || ((try? processState(pid)) ?? nil) == "T"
}
