import Foundation
import Synchronization

/// Fresh, short temporary directories (a Unix socket path must stay under 104 bytes), removed
/// when the test process exits — as Go's `t.TempDir()` is — so a suite run a thousand times
/// leaves nothing in /tmp. `BGD_KEEP_TEST_DIRECTORIES=1` keeps them, to look at after a failure.
public enum TemporaryDirectory {
    public static let keepVariable = "BGD_KEEP_TEST_DIRECTORIES"
    private static let made = Mutex<[String]>([])

    public static func make() -> String {
        let path = "/tmp/bgd-test-" + UUID().uuidString.prefix(8).lowercased()
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let first = made.withLock { made in
            defer { made.append(path) }
            return made.isEmpty
        }
        if first, !["1", "yes", "true"].contains(ProcessInfo.processInfo.environment[keepVariable] ?? "") {
            atexit { TemporaryDirectory.removeAll() }
        }
        return path
    }

    /// Removes every directory made so far. At exit only: a test's processes may still be using
    /// its directory until then.
    static func removeAll() {
        for path in made.withLock({ $0 }) { try? FileManager.default.removeItem(atPath: path) }
    }
}
