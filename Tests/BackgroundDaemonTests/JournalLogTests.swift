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
@Suite(.timeLimit(.minutes(1)))
struct JournalLogTests {
    /// A datagram socket bound at `path`, as journald's `/run/systemd/journal/socket` is.
    final class JournalListener: @unchecked Sendable {
        let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)

        init(path: String) throws {
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
            }
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
                }
            }
            guard bound else { throw POSIXError(.EADDRINUSE) }
        }

        deinit { close(descriptor) }

        /// Records until one satisfies `match` (waiting on the kernel, on a thread of its own),
        /// or nil after `seconds` without one.
        func record(within seconds: Int32, where match: @escaping @Sendable (String) -> Bool) async -> String? {
            let descriptor = self.descriptor
            return await withCheckedContinuation { continuation in
                Thread {
                    var buffer = [UInt8](repeating: 0, count: 65536)
                    var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                    while poll(&entry, 1, seconds * 1000) == 1 {
                        let count = recv(descriptor, &buffer, buffer.count, 0)
                        guard count > 0 else { break }
                        let record = String(decoding: buffer[0..<count], as: UTF8.self)
                        if match(record) { return continuation.resume(returning: record) }
                    }
                    continuation.resume(returning: nil)
                }.start()
            }
        }
    }

    @Test func aCrashedRunIsAWarningWithTheAppsFields() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let journal = try JournalListener(path: directory + "/journal.sock")
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
