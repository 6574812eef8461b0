import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What /proc says about an app process, and the one place a bare signal is sent from.
enum AppProcessInfo {
    /// Sends `signal` to `target` (a pid, or minus a process group). False when nothing got it.
    @discardableResult
    static func signal(_ target: Int32, _ signal: Int32) -> Bool { kill(target, signal) == 0 }

    /// Whether its process group is the foreground group of its terminal: a shell is waiting on
    /// it, and a SIGSTOP would hand the terminal back to the shell (`[1]+ Stopped`), leaving the
    /// app a background job that cannot read its tty after SIGCONT.
    static func isTerminalForeground(_ pid: Int32) -> Bool {
        // After the name: state, ppid, pgrp, session, tty_nr, tpgid.
        guard let fields = ProcStat.fields(of: pid), fields.count > 5, let group = Int32(fields[2]),
            let terminal = Int64(fields[4]), let foreground = Int32(fields[5])
        else { return false }
        return terminal != 0 && foreground == group
    }

    /// The environment the process started with (`/proc/<pid>/environ`); nil when it cannot be
    /// read — gone, or another user's.
    static func environment(of pid: Int32) -> [String: String]? {
        guard let file = FileHandle(forReadingAtPath: "/proc/\(pid)/environ") else { return nil }
        defer { try? file.close() }
        guard let data = try? file.readToEnd() else { return nil }
        var environment: [String: String] = [:]
        for item in data.split(separator: 0) {
            guard let equals = item.firstIndex(of: UInt8(ascii: "=")) else { continue }
            environment[String(decoding: item[..<equals], as: UTF8.self)] =
                String(decoding: item[item.index(after: equals)...], as: UTF8.self)
        }
        return environment
    }

    /// User + system CPU time of the process itself (fields 14 and 15, in clock ticks).
    static func cpuMicroseconds(of pid: Int32) -> UInt64? {
        guard let fields = ProcStat.fields(of: pid), fields.count > 12, let user = UInt64(fields[11]),
            let system = UInt64(fields[12])
        else { return nil }
        let ticksPerSecond = UInt64(max(sysconf(Int32(_SC_CLK_TCK)), 1))
        return (user + system) * 1_000_000 / ticksPerSecond
    }

    /// The most memory the process has held resident (`VmHWM`), in bytes.
    static func peakResidentBytes(of pid: Int32) -> UInt64? {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8) else { return nil }
        for line in status.split(separator: "\n") where line.hasPrefix("VmHWM:") {
            let kilobytes = line.dropFirst("VmHWM:".count).split(separator: " ").first.flatMap { UInt64($0) }
            return kilobytes.map { $0 * 1024 }
        }
        return nil
    }
}
