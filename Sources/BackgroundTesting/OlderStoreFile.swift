import GRDB

/// A SQLite store file as an older version left it: `statements` run on it directly, and the
/// record of `migration` forgotten, so the next open runs that migration again — how a test
/// shows that opening a store mends what an older bgd or relay wrote.
public enum OlderStoreFile {
    public static func rewrite(_ path: String, with statements: [String], forgetting migration: String) async throws {
        let queue = try DatabaseQueue(path: path)
        try await queue.write { db in
            for statement in statements { try db.execute(sql: statement) }
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = ?", arguments: [migration])
        }
        try queue.close()
    }
}
