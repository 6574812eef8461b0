import BackgroundStore
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A process an app reported as its own, which bgd may stop, continue and end.
///
/// bgd signals only processes of its own user and never itself (an app running inside bgd's
/// process, as in tests, is tracked but never signalled). A process that leads its own group
/// is signalled as a group, so helpers it started stop and go with it; any other (say, one
/// started from the same shell as bgd, without job control) alone.
struct AppProcess: Hashable, Sendable {
    let processID: Int32
    /// Whether bgd may signal it at all.
    let canSignal: Bool
    /// Its start time, to recognise it after a restart of bgd.
    let startTicks: Int64?

    init(processID: Int32) {
        self.processID = processID
        canSignal = Self.maySignal(processID)
        startTicks = LaunchedProcess.startTicks(of: processID)
    }

    /// Continues a process a previous bgd stopped, if it is still that process.
    static func continueLeftover(_ leftover: SuspendedProcess) -> Bool {
        guard LaunchedProcess.startTicks(of: leftover.processID) == leftover.startTicks else { return false }
        return AppProcess(processID: leftover.processID).send(SIGCONT)
    }

    private static func maySignal(_ pid: Int32) -> Bool {
        guard pid > 1, pid != getpid(), kill(pid, 0) == 0 else { return false }
        #if os(Linux)
            var info = stat()
            guard stat("/proc/\(pid)", &info) == 0, info.st_uid == getuid() else { return false }
        #endif
        return true
    }

    /// Sends `signal` to the process's group if it leads one, else to the process.
    @discardableResult
    func send(_ signal: Int32) -> Bool {
        guard canSignal else { return false }
        let target = getpgid(processID) == processID ? -processID : processID
        return kill(target, signal) == 0
    }

    /// Whether the process still exists.
    var isAlive: Bool { kill(processID, 0) == 0 }

    /// Whether its process group is the foreground group of its terminal: a shell is waiting on
    /// it, and a SIGSTOP would hand the terminal back to the shell (`[1]+ Stopped`), leaving the
    /// app a background job that cannot read its tty after SIGCONT. bgd never stops such a process
    /// (its background time still ends: the handlers run, it is told).
    var isTerminalForeground: Bool { Self.isTerminalForeground(processID) }

    static func isTerminalForeground(_ pid: Int32) -> Bool {
        // After the name: state, ppid, pgrp, session, tty_nr, tpgid.
        guard let fields = ProcStat.fields(of: pid), fields.count > 5, let group = Int32(fields[2]), let terminal = Int64(fields[4]), let foreground = Int32(fields[5]) else { return false }
        return terminal != 0 && foreground == group
    }
}
