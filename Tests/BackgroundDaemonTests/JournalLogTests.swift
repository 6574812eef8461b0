import Background
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// bgd under systemd logs in journald's native protocol, trouble at warning with the app's id
/// as a field (issue 18: `journalctl --user -u bgd -p warning`, `journalctl APP_ID=…`). A real
/// bgd; the test listens on a datagram socket where journald's would be.
@Suite(.timeLimit(.minutes(5)))
struct JournalLogTests {
    @Test func aCrashedRunIsAWarningWithTheAppsFields() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let journal = try DatagramListener(path: directory + "/journal.sock")
        let bgd = try Spawned(
            try BuiltProducts.path(of: "bgd"),
            [
                "--state-dir", directory + "/state", "--socket", directory + "/bgd.sock", "--push-port", "off",
                "--log-format", "journal", "--log-level", "info",
            ],
            environment: ProcessInfo.processInfo.environment.merging(
                ["BGD_JOURNAL_SOCKET": directory + "/journal.sock"]) { $1 }, mergeErrors: true)
        defer { bgd.signal(SIGKILL) }
        let ready = await journal.record(within: 20) { $0.contains(": bgd is ready") }
        #expect(ready?.contains("PRIORITY=5") == true, "\(ready ?? "no ready record")")

        let app = "com.example.journal"
        let admin = DaemonClient(socketPath: directory + "/bgd.sock")
        _ = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(id: AppID(rawValue: app)!, launchCommand: LaunchCommand(["/bin/false"])!),
            as: RegisteredApp.self)
        _ = try await admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
        let warning = await journal.record(within: 20) { $0.contains("APP_ID=\(app)") && $0.contains("OUTCOME=") }
        let fields = Set((warning ?? "").split(separator: "\n").map(String.init))
        #expect(fields.contains("PRIORITY=4"), "a crash is a warning: \(warning ?? "no record")")
        #expect(fields.contains("OUTCOME=crashed") && fields.contains("WAKE_REASON=manual"), "\(fields)")
        #expect(fields.contains("SYSLOG_IDENTIFIER=bgd"))
        #expect(fields.contains { $0.hasPrefix("MESSAGE=bg.runs: Run crashed: \(app)") }, "\(fields)")
    }
}
