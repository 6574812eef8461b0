import BackgroundModel
import Foundation
import QuietThreads

/// The programs bgctl runs — the bgd a unit will run (`bgd --check`), systemctl — through the
/// same `ChildProcess` bgd runs its helpers with, and finding them on PATH.
enum Subprocess {
    /// `program` run to its end with its output and errors read together (`ChildProcess`); nil
    /// when it could not be started or did not end within `timeout` seconds.
    static func run(_ program: String, _ arguments: [String], timeout: Double = 30) -> ChildProcess.Ended? {
        ChildProcess.run(program, arguments, timeout: .seconds(timeout))
    }

    /// `name` as the shell would find it on PATH.
    static func onPath(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        return path.split(separator: ":").map { "\($0)/\(name)" }.first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
    }
}
