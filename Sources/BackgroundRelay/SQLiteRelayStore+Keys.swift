import BackgroundModel
import Foundation
import GRDB

extension SQLiteRelayStore {
    /// Adds or replaces a provider key (checked by the caller: `ProviderKeyRegistration.problem`
    /// and a PEM that parses).
    public func addProviderKey(_ key: ProviderKeyRegistration, now: Date) async throws {
        let topics = String(decoding: try JSONEncoder().encode(key.topics), as: UTF8.self)
        let version = try await database.write { db -> Int in
            try db.execute(
                sql: """
                    INSERT INTO providerKey(keyId, teamId, topics, publicKey, addedAt) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT(keyId) DO UPDATE SET teamId = excluded.teamId, topics = excluded.topics,
                        publicKey = excluded.publicKey, addedAt = excluded.addedAt
                    """, arguments: [key.keyID, key.teamID, topics, key.publicKeyPEM, now])
            try Self.bumpCredentials(db)
            return try Int.fetchOne(db, sql: "SELECT version FROM credentials") ?? 0
        }
        credentials.advance(to: version)
    }

    /// Removes a key; false if there was none.
    public func removeProviderKey(_ keyID: String) async throws -> Bool {
        let (removed, version) = try await database.write { db -> (Bool, Int) in
            try db.execute(sql: "DELETE FROM providerKey WHERE keyId = ?", arguments: [keyID])
            let removed = db.changesCount > 0
            try Self.bumpCredentials(db)
            return (removed, try Int.fetchOne(db, sql: "SELECT version FROM credentials") ?? 0)
        }
        credentials.advance(to: version)
        return removed
    }

    public func providerKey(_ keyID: String) async throws -> ProviderKeyRegistration? {
        try await database.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM providerKey WHERE keyId = ?", arguments: [keyID]).map(Self.key)
        }
    }

    public func providerKeys() async throws -> [ProviderKeyRegistration] {
        try await database.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM providerKey ORDER BY keyId").map(Self.key)
        }
    }

    private static func key(_ row: Row) throws -> ProviderKeyRegistration {
        let topics = (try? JSONDecoder().decode([String].self, from: Data((row["topics"] as String).utf8))) ?? []
        return ProviderKeyRegistration(
            keyID: row["keyId"], teamID: row["teamId"], topics: topics, publicKeyPEM: row["publicKey"],
            addedAt: try row.decode(forColumn: "addedAt"))
    }
}
