import BackgroundModel
import Foundation
import GRDB

extension BackgroundStore {
    /// The app's device token: the active one if it has one, else `make()`'s, stored now.
    public func deviceToken(for app: AppID, makingWith make: @escaping @Sendable () -> String, now: Date) async throws -> DeviceTokenInfo {
        try await writer.write { db in
            guard try AppRow.fetchOne(db, key: app.rawValue) != nil else { throw StoreError.appNotFound(app) }
            if let row = try Row.fetchOne(
                db, sql: "SELECT token, createdAt FROM deviceToken WHERE appId = ? AND revokedAt IS NULL", arguments: [app.rawValue])
            {
                return DeviceTokenInfo(app: app, token: row["token"], createdAt: row["createdAt"])
            }
            let token = make()
            try db.execute(sql: "INSERT INTO deviceToken(token, appId, createdAt) VALUES (?, ?, ?)", arguments: [token, app.rawValue, now])
            return DeviceTokenInfo(app: app, token: token, createdAt: now)
        }
    }

    /// The app's active token, without making one.
    public func activeDeviceToken(of app: AppID) async throws -> DeviceTokenInfo? {
        try await writer.read { db in
            try Row.fetchOne(db, sql: "SELECT token, createdAt FROM deviceToken WHERE appId = ? AND revokedAt IS NULL", arguments: [app.rawValue])
                .map { DeviceTokenInfo(app: app, token: $0["token"], createdAt: $0["createdAt"]) }
        }
    }

    /// Who a token belongs to, and since when it no longer counts (nil: active). Nil: never issued.
    public func deviceTokenOwner(_ token: String) async throws -> (app: AppID, revokedAt: Date?)? {
        try await writer.read { db in
            guard let row = try Row.fetchOne(db, sql: "SELECT appId, revokedAt FROM deviceToken WHERE token = ?", arguments: [token.lowercased()]),
                let app = AppID(rawValue: row["appId"])
            else { return nil }
            return (app, row["revokedAt"])
        }
    }

    /// `unregisterForRemoteNotifications`, or the app's unregistration: its tokens stop counting.
    public func revokeDeviceTokens(of app: AppID, now: Date) async throws {
        try await writer.write { db in
            try db.execute(sql: "UPDATE deviceToken SET revokedAt = ? WHERE appId = ? AND revokedAt IS NULL", arguments: [now, app.rawValue])
        }
    }

    public func addProviderKey(_ key: ProviderKeyRegistration, now: Date) async throws {
        try await writer.write { db in
            try db.execute(
                sql: """
                    INSERT INTO providerKey(keyId, teamId, topics, publicKey, addedAt) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT(keyId) DO UPDATE SET teamId = excluded.teamId, topics = excluded.topics, publicKey = excluded.publicKey
                    """,
                arguments: [key.keyID, key.teamID, ColumnJSON.encode(key.topics), key.publicKeyPEM, now])
        }
    }

    public func providerKey(_ keyID: String) async throws -> ProviderKeyRegistration? {
        try await writer.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM providerKey WHERE keyId = ?", arguments: [keyID]).map(Self.providerKey(row:))
        }
    }

    public func providerKeys() async throws -> [ProviderKeyRegistration] {
        try await writer.read { db in try Row.fetchAll(db, sql: "SELECT * FROM providerKey ORDER BY keyId").map(Self.providerKey(row:)) }
    }

    /// Removes a key; false when there was none.
    public func removeProviderKey(_ keyID: String) async throws -> Bool {
        try await writer.write { db in
            try db.execute(sql: "DELETE FROM providerKey WHERE keyId = ?", arguments: [keyID])
            return db.changesCount > 0
        }
    }

    private static func providerKey(row: Row) throws -> ProviderKeyRegistration {
        ProviderKeyRegistration(
            keyID: row["keyId"], teamID: row["teamId"], topics: try ColumnJSON.decode([String].self, from: row["topics"]),
            publicKeyPEM: row["publicKey"], addedAt: row["addedAt"])
    }
}
