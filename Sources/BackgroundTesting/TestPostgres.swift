import BackgroundRelay
import Foundation
import Logging
import PostgresNIO

/// The PostgreSQL the relay's tests use: `BGRELAY_TEST_POSTGRES` (Tests/Postgres/start.sh starts
/// one and prints it; CI does). Each test gets a database of its own, so tests run side by side.
public enum TestPostgres {
    /// The server's URL, if one is configured.
    public static var url: String? { ProcessInfo.processInfo.environment["BGRELAY_TEST_POSTGRES"] }

    /// Why PostgreSQL tests do not run here, for their `.enabled(if:)` — and CI sets
    /// BGRELAY_REQUIRE_POSTGRES so that a missing server fails instead.
    public static var isAvailable: Bool {
        url != nil || ProcessInfo.processInfo.environment["BGRELAY_REQUIRE_POSTGRES"] != nil
    }
    public static let skipReason = "needs PostgreSQL: eval \"$(Tests/Postgres/start.sh)\" (CI does)"

    public struct Missing: Error, CustomStringConvertible {
        public var description: String { "BGRELAY_REQUIRE_POSTGRES is set but BGRELAY_TEST_POSTGRES is not: \(skipReason)" }
    }

    /// A new, empty database on the test server: its URL.
    public static func makeDatabase() async throws -> String {
        guard let url, var components = URLComponents(string: url) else { throw Missing() }
        let name = "bgrelay_test_" + UUID().uuidString.replacingOccurrences(of: "-", with: "").prefix(16).lowercased()
        let client = PostgresClient(
            configuration: .init(
                host: components.host ?? "127.0.0.1", port: components.port ?? 5432, username: components.user ?? "",
                password: components.password, database: String(components.path.dropFirst()), tls: .disable),
            backgroundLogger: {
                var logger = Logger(label: "test-postgres")
                logger.logLevel = .error
                return logger
            }())
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            try await client.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"))
            group.cancelAll()
        }
        components.path = "/" + name
        return components.string ?? url
    }
}
