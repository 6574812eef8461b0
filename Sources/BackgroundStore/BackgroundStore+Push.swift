import BackgroundModel
import BackgroundPolicy
import Foundation
import GRDB

extension BackgroundStore {
    /// The app's device token: the active one if it has one, else `make()`'s, stored now.
    public func deviceToken(
        for app: AppID, makingWith make: @escaping @Sendable () -> String, now: Date
    ) async throws -> DeviceTokenInfo {
        let (info, made) = try await writer.write { db -> (DeviceTokenInfo, Bool) in
            guard try AppRow.fetchOne(db, key: app.rawValue) != nil else { throw StoreError.appNotFound(app) }
            if let row = try Row.fetchOne(
                db, sql: "SELECT token, createdAt FROM deviceToken WHERE appId = ? AND revokedAt IS NULL",
                arguments: [app.rawValue])
            {
                return (
                    DeviceTokenInfo(app: app, token: row["token"], createdAt: try row.decode(forColumn: "createdAt")),
                    false
                )
            }
            let token = make()
            try db.execute(
                sql: "INSERT INTO deviceToken(token, appId, createdAt) VALUES (?, ?, ?)",
                arguments: [token, app.rawValue, now])
            return (DeviceTokenInfo(app: app, token: token, createdAt: now), true)
        }
        if made { pushCredentials.advance() }  // a new token: the relay uplink registers it
        return info
    }

    /// Every device token ever issued, with its app and when it was revoked (nil: active).
    public func deviceTokens() async throws -> [(token: String, app: AppID, revokedAt: Date?)] {
        try await writer.read { db in
            try Row.fetchAll(db, sql: "SELECT token, appId, revokedAt FROM deviceToken ORDER BY createdAt").compactMap {
                row in
                let revokedAt: Date? = try row.decode(forColumn: "revokedAt")
                return AppID(rawValue: row["appId"]).map { (row["token"], $0, revokedAt) }
            }
        }
    }

    /// The app's active token, without making one.
    public func activeDeviceToken(of app: AppID) async throws -> DeviceTokenInfo? {
        try await writer.read { db in
            try Row.fetchOne(
                db, sql: "SELECT token, createdAt FROM deviceToken WHERE appId = ? AND revokedAt IS NULL",
                arguments: [app.rawValue]
            )
            .map { DeviceTokenInfo(app: app, token: $0["token"], createdAt: try $0.decode(forColumn: "createdAt")) }
        }
    }

    /// Who a token belongs to, and since when it no longer counts (nil: active). Nil: never issued.
    public func deviceTokenOwner(_ token: String) async throws -> (app: AppID, revokedAt: Date?)? {
        try await deviceTokenOwners([token])[token.lowercased()]
    }

    /// The owners of several tokens in one read, keyed by the token in lower case; a token never
    /// issued is missing. The relay's uplink looks up a whole read of pushes with it: a call per
    /// push is a hop to the store's thread each, and on busy cores a read of 20 pushes waited 20
    /// times (p50 85 → 28 ms through a relay at 1,000/s).
    public func deviceTokenOwners(
        _ tokens: some Sequence<String>
    ) async throws -> [String: (app: AppID, revokedAt: Date?)] {
        let wanted = Array(Set(tokens.map { $0.lowercased() }))
        guard !wanted.isEmpty else { return [:] }
        return try await writer.read { db in
            var owners: [String: (app: AppID, revokedAt: Date?)] = [:]
            // In slices: SQLite's limit on a statement's parameters is far above a read's pushes,
            // but a relay is not trusted to keep its reads small.
            for start in stride(from: 0, to: wanted.count, by: 500) {
                let slice = Array(wanted[start..<min(start + 500, wanted.count)])
                let marks = Array(repeating: "?", count: slice.count).joined(separator: ",")
                for row in try Row.fetchAll(
                    db, sql: "SELECT token, appId, revokedAt FROM deviceToken WHERE token IN (\(marks))",
                    arguments: StatementArguments(slice))
                {
                    guard let app = AppID(rawValue: row["appId"]) else { continue }
                    owners[row["token"]] = (app, try row.decode(forColumn: "revokedAt"))
                }
            }
            return owners
        }
    }

    /// `unregisterForRemoteNotifications`, or the app's unregistration: its tokens stop counting.
    /// A revoked token is kept so that a push to it answers 410 with when it stopped counting,
    /// but only the app's latest `revokedTokensKeptPerApp` (and, by the pruner, for as long as
    /// history is kept): an app that registers and unregisters in a loop would otherwise add a
    /// row each time for ever, and the relay uplink resends every token it holds at each
    /// change. A push to a token forgotten so answers 400 BadDeviceToken, as to one never issued.
    public func revokeDeviceTokens(of app: AppID, now: Date) async throws {
        try await writer.write { db in try Self.revokeDeviceTokens(of: app, now: now, in: db) }
        pushCredentials.advance()
    }

    static func revokeDeviceTokens(of app: AppID, now: Date, in db: Database) throws {
        try db.execute(
            sql: "UPDATE deviceToken SET revokedAt = ? WHERE appId = ? AND revokedAt IS NULL",
            arguments: [now, app.rawValue])
        try db.execute(
            sql: """
                DELETE FROM deviceToken WHERE appId = ? AND revokedAt IS NOT NULL AND token NOT IN (
                    SELECT token FROM deviceToken WHERE appId = ? AND revokedAt IS NOT NULL
                    ORDER BY revokedAt DESC, createdAt DESC LIMIT ?)
                """,
            arguments: [app.rawValue, app.rawValue, Self.revokedTokensKeptPerApp])
    }

    /// The most revoked device tokens kept per app (see `revokeDeviceTokens`).
    public static let revokedTokensKeptPerApp = 20

    public func addProviderKey(_ key: ProviderKeyRegistration, now: Date) async throws {
        try await writer.write { db in
            try db.execute(
                sql: """
                    INSERT INTO providerKey(keyId, teamId, topics, publicKey, addedAt) VALUES (?, ?, ?, ?, ?)
                    ON CONFLICT(keyId) DO UPDATE SET teamId = excluded.teamId, topics = excluded.topics, publicKey = excluded.publicKey
                    """,
                arguments: [key.keyID, key.teamID, ColumnJSON.encode(key.topics), key.publicKeyPEM, now])
        }
        pushCredentials.advance()
    }

    public func providerKey(_ keyID: String) async throws -> ProviderKeyRegistration? {
        try await writer.read { db in
            try Row.fetchOne(db, sql: "SELECT * FROM providerKey WHERE keyId = ?", arguments: [keyID]).map(
                Self.providerKey(row:))
        }
    }

    public func providerKeys() async throws -> [ProviderKeyRegistration] {
        try await writer.read { db in
            try Row.fetchAll(db, sql: "SELECT * FROM providerKey ORDER BY keyId").map(Self.providerKey(row:))
        }
    }

    /// Removes a key; false when there was none.
    public func removeProviderKey(_ keyID: String) async throws -> Bool {
        defer { pushCredentials.advance() }
        return try await writer.write { db in
            try db.execute(sql: "DELETE FROM providerKey WHERE keyId = ?", arguments: [keyID])
            return db.changesCount > 0
        }
    }

    private static func providerKey(row: Row) throws -> ProviderKeyRegistration {
        ProviderKeyRegistration(
            keyID: row["keyId"], teamID: row["teamId"],
            topics: try ColumnJSON.decode([String].self, from: row["topics"]),
            publicKeyPEM: row["publicKey"], addedAt: try row.decode(forColumn: "addedAt"))
    }
}

/// A push the gateway accepted, as stored.
public struct StoredPush: Hashable, Sendable {
    public var id: PushID
    public var app: AppID
    public var apnsID: String
    public var pushType: String
    public var priority: Int
    public var collapseID: String?
    public var expiration: Date?
    public var payload: Data
    public var receivedAt: Date
    public var state: PushState
    public var reasonCode: ReasonCode?
    public var reason: String?
    /// How many runs it has gone to (each spends a wake; a run that crashes sends it again).
    public var attempts: Int
}

extension StoredPush {
    /// Nil for a row no push could have (an unknown app id or state); a date that does not
    /// read throws (GRDB's subscript would stop bgd, and at every start after).
    init?(row: Row) throws {
        guard let app = AppID(rawValue: row["appId"]), let state = PushState(rawValue: row["state"]) else { return nil }
        self.init(
            id: PushID(row["id"] as Int64), app: app, apnsID: row["apnsId"], pushType: row["pushType"],
            priority: row["priority"],
            collapseID: row["collapseId"], expiration: try row.decode(forColumn: "expiration"), payload: row["payload"],
            receivedAt: try row.decode(forColumn: "receivedAt"),
            state: state, reasonCode: (row["reasonCode"] as String?).flatMap(ReasonCode.init(rawValue:)),
            reason: row["reason"], attempts: row["attempts"])
    }
}

extension BackgroundStore {
    /// The app's pushes, newest first.
    public func pushes(of app: AppID, limit: Int = 100) async throws -> [StoredPush] {
        try await writer.read { db in
            try Row.fetchAll(
                db, sql: "SELECT * FROM push WHERE appId = ? ORDER BY id DESC LIMIT ?",
                arguments: [app.rawValue, limit]
            )
            .compactMap { try StoredPush(row: $0) }
        }
    }
}

extension BackgroundStore {
    /// Apps with background pushes waiting.
    public func appsWithQueuedPushes() async throws -> [AppID] {
        try await writer.read { db in
            try String.fetchAll(
                db, sql: "SELECT DISTINCT appId FROM push WHERE state = '\(PushState.queued.rawValue)' ORDER BY appId"
            ).compactMap(AppID.init(rawValue:))
        }
    }

    /// At most this many of an app's pushes wait: the newest stay, older ones are replaced. An app
    /// woken a few times an hour for a push drains about 72 a day; a provider giving each push
    /// a collapse id of its own would otherwise queue them without end (APNs keeps one per app
    /// for a device that is away).
    public static let queuedPushesPerApp = 100

    /// Coalesces the app's waiting pushes — the newest of each collapse id (and of those without
    /// one) stays, the others are marked replaced, and past `queuedPushesPerApp` the oldest
    /// are too — and returns the oldest that stays: each collapse id has its turn in the order
    /// it came (before, the newest went first, and one collapse id a provider sent to often
    /// enough held every other back for ever). A push with `apns-expiration: 0` replaces none
    /// and is replaced by none: it goes now or never, and one that cannot go must not take an
    /// older push's place (APNs stores none). A replaced push keeps its row (what came, when,
    /// and what replaced it) but not its payload, which nobody will read: a provider sending 20
    /// a second to one app left 8 GB a day of them.
    public func coalesceQueuedPushes(of app: AppID) async throws -> StoredPush? {
        try await writer.write { db in
            let lasting = "(expiration IS NULL OR expiration <> ?)"
            // One statement, so a flood of pushes to one app costs one pass, not one update each.
            try db.execute(
                sql: """
                    UPDATE push SET state = '\(PushState.replaced.rawValue)', reasonCode = ?, payload = X'',
                        reason = CASE WHEN collapseId IS NULL THEN 'a newer push for the app replaced it'
                                 ELSE 'a newer push with collapse id ''' || collapseId || ''' replaced it' END
                    WHERE appId = ? AND state = '\(PushState.queued.rawValue)' AND \(lasting) AND id NOT IN (
                        SELECT max(id) FROM push WHERE appId = ? AND state = '\(PushState.queued.rawValue)' AND \(lasting)
                        GROUP BY ifnull(collapseId, ''))
                    """,
                arguments: [
                    ReasonCode.pushReplaced.rawValue, app.rawValue, PushThrottle.nowOrNever, app.rawValue,
                    PushThrottle.nowOrNever,
                ])
            try db.execute(
                sql: """
                    UPDATE push SET state = '\(PushState.replaced.rawValue)', reasonCode = ?, payload = X'', reason = ?
                    WHERE appId = ? AND state = '\(PushState.queued.rawValue)' AND id < (
                        SELECT id FROM push WHERE appId = ? AND state = '\(PushState.queued.rawValue)'
                        ORDER BY id DESC LIMIT 1 OFFSET ?)
                    """,
                arguments: [
                    ReasonCode.pushReplaced.rawValue,
                    "more than \(Self.queuedPushesPerApp) pushes waited for the app; the oldest made way",
                    app.rawValue, app.rawValue, Self.queuedPushesPerApp - 1,
                ])
            // Read in the same transaction: a second call would wait for the store's thread
            // again, and the dispatcher is on the way from a push to the app's handler.
            return try Row.fetchOne(
                db,
                sql:
                    "SELECT * FROM push WHERE appId = ? AND state = '\(PushState.queued.rawValue)' ORDER BY id LIMIT 1",
                arguments: [app.rawValue]
            )
            .flatMap { try StoredPush(row: $0) }
        }
    }

    /// Drops the app's waiting pushes but `head` whose `apns-expiration` comes before `turn`:
    /// they wait behind `head`, which goes first, so they would expire before their turn — and
    /// one with `apns-expiration: 0` cannot go now. Returns those dropped.
    @discardableResult
    public func dropQueuedPushes(
        of app: AppID, expiringBefore turn: Date, behind head: PushID, reason: DecisionReason
    ) async throws -> [PushID] {
        try await writer.write { db in
            let condition = """
                appId = ? AND state = '\(PushState.queued.rawValue)' AND id <> ?
                    AND expiration IS NOT NULL AND expiration < ?
                """
            let arguments: StatementArguments = [app.rawValue, head.rawValue, turn]
            let dropped = try Int64.fetchAll(db, sql: "SELECT id FROM push WHERE \(condition)", arguments: arguments)
            guard !dropped.isEmpty else { return [] }
            try db.execute(
                sql:
                    "UPDATE push SET state = '\(PushState.dropped.rawValue)', reasonCode = ?, reason = ? WHERE \(condition)",
                arguments: [reason.code.rawValue, reason.detail] + arguments)
            return dropped.map(PushID.init(rawValue:))
        }
    }

    /// Marks a waiting push dropped, with why.
    public func dropPush(_ id: PushID, reason: DecisionReason) async throws {
        try await writer.write { db in
            try db.execute(
                sql:
                    "UPDATE push SET state = '\(PushState.dropped.rawValue)', reasonCode = ?, reason = ? WHERE id = ? AND state = '\(PushState.queued.rawValue)'",
                arguments: [reason.code.rawValue, reason.detail, id.rawValue])
        }
    }

    /// Notes why a push still waits (it stays queued); writes nothing when that is already noted.
    public func notePushWaiting(_ id: PushID, reason: DecisionReason) async throws {
        try await writer.write { db in
            try db.execute(
                sql:
                    "UPDATE push SET reasonCode = ?, reason = ? WHERE id = ? AND state = '\(PushState.queued.rawValue)' AND (reason IS NOT ? OR reasonCode IS NOT ?)",
                arguments: [reason.code.rawValue, reason.detail, id.rawValue, reason.detail, reason.code.rawValue])
        }
    }

    /// The app's throttle allowance as of its last push wake; nil when it never had one.
    public func pushAllowance(of app: AppID) async throws -> PushThrottle.Allowance? {
        try await writer.read { db in
            try Row.fetchOne(db, sql: "SELECT tokens, at FROM pushAllowance WHERE appId = ?", arguments: [app.rawValue])
                .map { PushThrottle.Allowance(tokens: $0["tokens"], at: try $0.decode(forColumn: "at")) }
        }
    }

    static func savePushAllowance(_ allowance: PushThrottle.Allowance, of app: AppID, db: Database) throws {
        try db.execute(
            sql:
                "INSERT INTO pushAllowance(appId, tokens, at) VALUES (?, ?, ?) ON CONFLICT(appId) DO UPDATE SET tokens = excluded.tokens, at = excluded.at",
            arguments: [app.rawValue, allowance.tokens, allowance.at])
    }
}

/// A push to queue (see `enqueuePushes`).
public struct NewPush: Sendable {
    public var app: AppID
    public var apnsID: String
    public var pushType: String
    public var priority: Int
    public var collapseID: String?
    public var expiration: Date?
    public var payload: Data
    /// Set for a push that arrives already undeliverable (through the relay, for a token the app
    /// no longer holds): kept as `dropped` with this reason, so it ends recorded, never silently.
    public var dropped: DecisionReason?

    public init(
        app: AppID, apnsID: String, pushType: String, priority: Int, collapseID: String?, expiration: Date?,
        payload: Data, dropped: DecisionReason? = nil
    ) {
        self.dropped = dropped
        self.app = app
        self.apnsID = apnsID
        self.pushType = pushType
        self.priority = priority
        self.collapseID = collapseID
        self.expiration = expiration
        self.payload = payload
    }
}

extension BackgroundStore {
    /// Queues accepted pushes in one transaction (group commit: one fsync for all of them);
    /// alert pushes are only recorded, they wake nothing. Committed before the gateway's 200.
    /// A push whose apns-id the app already has is a provider's retry: it is not stored again
    /// (APNs treats a replay as one notification). One for an app unregistered since its token
    /// was checked (between the gateway's look and this commit) is not stored: it would wait
    /// for good, under no app, and go to the next app registered under that id.
    public func enqueuePushes(_ pushes: [NewPush], now: Date) async throws {
        try await writer.write { db in
            let statement = try db.makeStatement(
                sql: """
                    INSERT INTO push(appId, apnsId, pushType, priority, collapseId, expiration, payload, receivedAt, state,
                        reasonCode, reason)
                    SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM app WHERE id = ?)
                    ON CONFLICT(appId, apnsId) DO NOTHING
                    """)
            for push in pushes {
                try statement.execute(arguments: [
                    push.app.rawValue, push.apnsID, push.pushType, push.priority, push.collapseID, push.expiration,
                    push.payload, now,
                    (push.dropped != nil ? PushState.dropped : push.pushType == "background" ? .queued : .recorded)
                        .rawValue,
                    push.dropped?.code.rawValue, push.dropped?.detail, push.app.rawValue,
                ])
            }
        }
    }
}
