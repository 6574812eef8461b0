import BackgroundModel
import Foundation
import Testing

/// Where bgctl and apps look for bgd's socket when they are not told.
struct DaemonLocationTests {
    @Test func theSocketIsFoundWhereItIsSaidToBeOrWhereSystemdRunsBgd() throws {
        let runUser = FileManager.default.temporaryDirectory.appendingPathComponent("run-user-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: runUser) }
        let home = ["HOME": "/home/someone"]
        #expect(
            DaemonLocation.defaultSocketPath(environment: home.merging(["BGD_SOCKET": "/x/bgd.sock"]) { $1 })
                == "/x/bgd.sock")
        #expect(
            DaemonLocation.defaultSocketPath(environment: home.merging(["XDG_RUNTIME_DIR": "/run/user/7"]) { $1 })
                == "/run/user/7/bgd/bgd.sock")
        // No XDG_RUNTIME_DIR (su, sudo -u, cron) and no bgd in systemd's runtime directory: the state's.
        #expect(
            DaemonLocation.defaultSocketPath(environment: home, userRuntimeDirectories: runUser)
                == "/home/someone/.local/state/bgd/run/bgd.sock")
        // A bgd systemd runs for this user: there (before, bgctl said it was not running).
        let socket = "\(runUser)/\(getuid())/bgd/bgd.sock"
        try FileManager.default.createDirectory(
            atPath: (socket as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: socket, contents: nil))
        #expect(DaemonLocation.defaultSocketPath(environment: home, userRuntimeDirectories: runUser) == socket)
    }
}
