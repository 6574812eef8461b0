import BackgroundModel
import Foundation
import GRDB
import QuietThreads
import Synchronization

/// A relay node's durable state: enrolled devices, the device tokens each registered, the
/// providers' keys, and the pushes accepted and not yet ended. One SQLite file (WAL) for a node
/// on its own; every method is one transaction, and a push is committed before the provider's 200.
public struct SQLiteRelayStore: RelayStore {
    /// On threads of the relay's own, not GRDB's dispatch queues: an idle relay sleeps.
    let database: QuietDatabase
    /// Advances whenever this process changes a provider key or a device token.
    public let credentials = CredentialsVersion()
    /// The most tokens a device may hold (`defaultTokensPerDevice`).
    public var tokensPerDevice = defaultTokensPerDevice
    /// When a token's pending pushes are cut back as they arrive.
    let trim = PendingTrim()

    /// Opens (creating if needed) the database at `path`.
    public static func open(atPath path: String) throws -> SQLiteRelayStore {
        var configuration = Configuration()
        configuration.foreignKeysEnabled = true
        configuration.busyMode = .timeout(5)
        configuration.prepareDatabase { db in
            if !db.configuration.readonly { try db.execute(sql: "PRAGMA synchronous = FULL") }
        }
        let pool = try DatabasePool(path: path, configuration: configuration)
        // The pool sets synchronous = NORMAL on its writer after `prepareDatabase`: once more,
        // so a 200 survives a power loss as APNs' does.
        try pool.writeWithoutTransaction { try $0.execute(sql: "PRAGMA synchronous = FULL") }
        return try SQLiteRelayStore(pool)
    }

    /// An in-memory store (tests of the store alone).
    public static func inMemory() throws -> SQLiteRelayStore { try SQLiteRelayStore(DatabaseQueue()) }

    init(_ database: any DatabaseWriter) throws {
        self.database = QuietDatabase(
            database, readers: WorkerThreads(count: 1, name: "bgrelay-read"),
            writers: WorkerThreads(count: 1, name: "bgrelay-store"))
        try Self.migrator.migrate(database)
    }

    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("relay") { db in
            try db.create(table: "device") { t in
                t.primaryKey("id", .text)
                t.column("secretHash", .text).notNull()
                t.column("enrolledAt", .datetime).notNull()
                // The newest uplink's claim: its fencing token, and the node that holds it.
                t.column("fencing", .integer).notNull().defaults(to: 0)
                t.column("claimedBy", .text)
            }
            // A token is bound to the device that registered it first; revoked, it answers 410
            // with the time, for ever.
            try db.create(table: "deviceToken") { t in
                t.primaryKey("token", .text)
                t.column("deviceId", .text).notNull().indexed().references("device")
                t.column("topic", .text).notNull()
                t.column("registeredAt", .datetime).notNull()
                t.column("revokedAt", .datetime)
            }
            try db.create(table: "providerKey") { t in
                t.primaryKey("keyId", .text)
                t.column("teamId", .text).notNull()
                t.column("topics", .text).notNull()  // JSON [String]
                t.column("publicKey", .text).notNull()
                t.column("addedAt", .datetime).notNull()
            }
            // A push's id is its sequence number on the uplink. It stays `pending` until the
            // device acknowledges it (`delivered`) or it ends with a reason: `expired`,
            // `replaced` (a newer push with its collapse id), `revoked` (its token was).
            try db.create(table: "push") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("deviceId", .text).notNull().references("device")
                t.column("token", .text).notNull()
                t.column("topic", .text).notNull()
                t.column("apnsId", .text).notNull()
                t.column("pushType", .text).notNull()
                t.column("priority", .integer).notNull()
                t.column("collapseId", .text)
                t.column("expiration", .datetime)
                t.column("payload", .blob).notNull()
                t.column("acceptedAt", .datetime).notNull()
                t.column("state", .text).notNull()
                t.column("endedAt", .datetime)
            }
            try db.create(index: "push_pending", on: "push", columns: ["deviceId", "state", "id"])
            // Bumped by every change of keys or tokens, so another process (`bgrelay keys add`)
            // is seen by the serving one.
            try db.create(table: "credentials") { t in t.column("version", .integer).notNull() }
            try db.execute(sql: "INSERT INTO credentials(version) VALUES (0)")
        }
        migrator.registerMigration("relay-pruning") { db in
            // The pruner's: ended pushes by when they ended, pending ones by age (partial, so
            // each holds only the rows it is for).
            try db.execute(sql: "CREATE INDEX push_ended ON push(endedAt) WHERE state != 'pending'")
            try db.execute(sql: "CREATE INDEX push_waiting ON push(acceptedAt) WHERE state = 'pending'")
        }
        migrator.registerMigration("relay-revokedTokens") { db in
            // The pruner forgets tokens revoked long ago; a device at its limit, its oldest.
            try db.execute(
                sql: "CREATE INDEX deviceToken_revoked ON deviceToken(revokedAt) WHERE revokedAt IS NOT NULL")
        }
        migrator.registerMigration("relay-unclaimedDevices") { db in
            // The pruner forgets devices enrolled long ago that never connected.
            try db.execute(sql: "CREATE INDEX device_unclaimed ON device(enrolledAt) WHERE fencing = 0")
        }
        migrator.registerMigration("relay-lastSeen") { db in
            // When the device last connected, or was seen connected by the pruner of the node
            // holding its uplink: one gone longer than `forgetAfter` is forgotten with its tokens.
            try db.execute(sql: "ALTER TABLE device ADD COLUMN lastSeenAt DATETIME")
            try db.execute(sql: "UPDATE device SET lastSeenAt = enrolledAt")
            try db.execute(sql: "CREATE INDEX device_lastSeen ON device(lastSeenAt)")
        }
        migrator.registerMigration("relay-readableDates") { db in
            // Before session 28 a provider's apns-expiration past 9999, or a device's revoke `at`
            // near Int64.max, was stored as a five-digit year or '': reading it back trapped the
            // relay at every start (and text comparison took it as already past). Such a value
            // becomes the last second of 9999 (StorableDates), and a revocation its own stored
            // registration time, the earliest it can have been.
            try db.execute(
                sql:
                    "UPDATE push SET expiration = '9999-12-31 23:59:59.000' WHERE expiration IS NOT NULL AND (expiration = '' OR substr(expiration, 5, 1) <> '-')"
            )
            try db.execute(
                sql:
                    "UPDATE deviceToken SET revokedAt = registeredAt WHERE revokedAt IS NOT NULL AND (revokedAt = '' OR substr(revokedAt, 5, 1) <> '-')"
            )
        }
        migrator.registerMigration("relay-pendingByToken") { db in
            // A token's pending pushes, newest first, for the cut as pushes arrive (partial: the
            // cut names `state = 'pending'` as written, which SQLite needs to use it).
            try db.execute(sql: "CREATE INDEX push_pendingByToken ON push(token, id) WHERE state = 'pending'")
        }
        migrator.registerMigration("relay-nowOrNever") { db in
            // A push sent with `apns-expiration: 0`: the relay gives the device a minute to take
            // it (`expiration`), and bgd is told it goes now or never.
            try db.execute(sql: "ALTER TABLE push ADD COLUMN nowOrNever BOOLEAN NOT NULL DEFAULT 0")
        }
        return migrator
    }

    /// Marks keys or tokens changed, in the transaction that changed them.
    static func bumpCredentials(_ db: Database) throws {
        try db.execute(sql: "UPDATE credentials SET version = version + 1")
    }

    /// The stored credentials version (moves with every change by any process).
    public func credentialsVersion() async throws -> Int {
        try await database.read { try Int.fetchOne($0, sql: "SELECT version FROM credentials") ?? 0 }
    }
}

/// The credentials version as last read, and when: the intake asks it on every push, so it is
/// refreshed from the database at most once a second, off the request's path. The second is
/// time that really passes (`WallClock.elapsed`): counted on the wall clock, a clock set back an
/// hour kept a key removed by another process working for the hour.
public final class CredentialsVersion: Sendable {
    private struct State {
        var version = 0
        var readAt: Duration?
        var reading = false
    }
    private let state = Mutex(State())

    public init() {}

    /// The version known now; starts a refresh if the last is over a second old.
    func current(elapsed now: Duration, refresh: @escaping @Sendable () async -> Int?) -> Int {
        let (version, start) = state.withLock { state -> (Int, Bool) in
            let start = !state.reading && state.readAt.map { now - $0 >= .seconds(1) } != false
            if start { state.reading = true }
            return (state.version, start)
        }
        if start {
            Task {
                let read = await refresh()
                self.state.withLock { state in
                    if let read { state.version = max(state.version, read) }
                    state.readAt = now
                    state.reading = false
                }
            }
        }
        return version
    }

    /// This process changed them: seen at once, without waiting for the next read.
    func advance(to version: Int) { state.withLock { $0.version = max($0.version, version) } }
}
