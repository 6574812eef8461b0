import BackgroundDaemon
import BackgroundModel
import BackgroundPolicy
import BackgroundTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// T14: a server whose certificate nobody trusts: the transfer fails at once with `tls`, and is
/// not retried. The TLS server is `openssl s_server` with a fresh self-signed certificate.
@Suite(.timeLimit(.minutes(5)))
struct TransferTLSTests {
    @Test func anUntrustedCertificateFailsAtOnce() async throws {
        let directory = TemporaryDirectory.make()
        let key = directory + "/key.pem", certificate = directory + "/cert.pem"
        let made = try await Command.run(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", certificate, "-days", "1",
                "-subj", "/CN=127.0.0.1",
            ])
        #expect(made.status == 0, "\(made.standardError)")
        let server = try Spawned(
            "/usr/bin/openssl", ["s_server", "-accept", "127.0.0.1:0", "-cert", certificate, "-key", key, "-www"],
            mergeErrors: true)
        defer { server.signal(SIGKILL) }  // s_server can outlive a SIGTERM (seen: one left per run)
        // s_server prints "ACCEPT 127.0.0.1:PORT" once it listens on the port it was given.
        let port = try #require(await Self.acceptedPort(from: server.output))

        try await TestDaemon.with(
            clock: ManualClock(now: Date(timeIntervalSince1970: 1_767_603_600)),
            transfers: .init(engine: .init(connectTimeout: .seconds(2)))
        ) { daemon in
            var activities = daemon.activity.subscribe().makeAsyncIterator()
            let record = try await daemon.admin.send(
                .post, "/v1/transfers",
                body: TransferRequest(
                    session: "tls", url: URL(string: "https://127.0.0.1:\(port)/file")!, destination: directory + "/out"
                ),
                as: TransferRecord.self)
            var ended: TransferRecord?
            while let activity = await activities.next() {
                if case .transferRetryScheduled(let id, _, let reason) = activity, id == record.id {
                    Issue.record("retried: \(reason)"); break
                }
                if case .transferEnded(let done) = activity, done.id == record.id {
                    ended = done
                    break
                }
            }
            #expect(
                ended?.state == .failed && ended?.error?.code == .tls && ended?.attempts == 1,
                "\(String(describing: ended))")
        }
    }

    /// Reads until s_server's ACCEPT line and returns its port; keeps draining the pipe after.
    static func acceptedPort(from handle: FileHandle) async -> Int? {
        await withCheckedContinuation { continuation in
            Thread {
                var seen = ""
                var resumed = false
                while true {
                    let data = handle.availableData
                    if data.isEmpty { break }
                    guard !resumed else { continue }
                    seen += String(decoding: data, as: UTF8.self)
                    if let line = seen.split(separator: "\n").first(where: { $0.hasPrefix("ACCEPT ") }),
                        let port = line.split(separator: ":").last.flatMap({
                            Int($0.trimmingCharacters(in: .whitespaces))
                        })
                    {
                        resumed = true
                        continuation.resume(returning: port)
                    }
                }
                if !resumed { continuation.resume(returning: nil) }
            }.start()
        }
    }
}
