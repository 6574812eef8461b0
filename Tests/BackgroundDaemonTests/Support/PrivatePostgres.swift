import Foundation

/// A PostgreSQL server of one test's own (Tests/Postgres/start.sh on another port and in another
/// directory), for a test that crashes and restarts it: the shared server stays up for the tests
/// running beside it. Made only where the shared one is (`TestPostgres.isAvailable`).
struct PrivatePostgres: Sendable {
    /// postgres://… of its `bgrelay` database.
    let url: String
    private let environment: [String: String]

    struct Failure: Error, CustomStringConvertible { let description: String }

    static let script = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Postgres/start.sh").path

    static func start() async throws -> PrivatePostgres {
        let port = Int.random(in: 55_500..<56_500)
        var environment = ProcessInfo.processInfo.environment
        environment["BGRELAY_TEST_POSTGRES_PORT"] = String(port)
        // Not under TemporaryDirectory: the server runs as `nobody`, which must reach its directory.
        environment["BGRELAY_TEST_POSTGRES_DIR"] = "/tmp/bgrelay-postgres-\(port)"
        let output = try await Command.run("/bin/bash", [script], environment: environment)
        guard output.status == 0, let line = output.standardOutput.split(separator: "\n").last,
            let url = line.split(separator: "=", maxSplits: 1).last
        else { throw Failure(description: "Tests/Postgres/start.sh failed: \(output.standardError)") }
        return PrivatePostgres(url: String(url), environment: environment)
    }

    /// Crashes the server (an immediate stop: no checkpoint, recovery on start), keeps it down
    /// for `seconds`, and starts it again.
    func restart(down seconds: Int) async throws {
        let output = try await Command.run("/bin/bash", [Self.script, "--restart", String(seconds)], environment: environment)
        guard output.status == 0 else { throw Failure(description: "restart failed: \(output.standardError)") }
    }

    func stop() async {
        _ = try? await Command.run("/bin/bash", [Self.script, "--stop"], environment: environment)
        try? FileManager.default.removeItem(atPath: environment["BGRELAY_TEST_POSTGRES_DIR"] ?? "")
    }
}
