import Foundation

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

/// Whether bgd has `pid` suspended: frozen in its cgroup, or stopped by SIGSTOP.
func isSuspended(_ pid: Int32) -> Bool {
    CgroupProbe.isFrozen(pid) || ((try? processState(pid)) ?? nil) == "T"
}
