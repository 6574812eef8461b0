/// How a process ended.
public enum ExitStatus: Hashable, Sendable, CustomStringConvertible {
    case exited(Int32)
    case signalled(Int32)

    /// Decodes a `waitpid` status word (the WIFEXITED/WEXITSTATUS/WTERMSIG macros, which Swift cannot import).
    init(waitStatus status: Int32) {
        if status & 0x7f == 0 {
            self = .exited((status >> 8) & 0xff)
        } else {
            self = .signalled(status & 0x7f)
        }
    }

    public var description: String {
        switch self {
        case .exited(let code): "exited with status \(code)"
        case .signalled(let signal): "killed by signal \(signal)\(Self.signalNames[signal].map { " (\($0))" } ?? "")"
        }
    }

    private static let signalNames: [Int32: String] = [
        1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE",
        9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM",
    ]
}
