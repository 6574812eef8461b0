import BackgroundGateway
import BackgroundModel
import Foundation
import Logging
import PostgresNIO
import ServiceLifecycle

/// The relay's state in PostgreSQL, shared by several nodes: any node takes any provider's push
/// and any device's uplink. A commit notifies every node (`NOTIFY bgrelay, 'push:<device>'`, sent
/// when the transaction commits); the node holding the device's uplink sends it. Pending pushes
/// are read under the device's claim (its row locked `FOR SHARE`, its fencing token checked): a
/// node that thinks it still holds a device (paused while it reconnected elsewhere) is refused
/// from the next read or acknowledgement on — what it had read before may still reach the
/// device, which drops the repeat by its apns-id. No node keeps state another needs.
public final class PostgresRelayStore: RelayStore {
    let client: PostgresClient
    /// For the LISTEN connection, which is not the pool's (see `follow`).
    let listenerConfiguration: PostgresConnection.Configuration
    let backgroundLogger: Logger
    let logger: Logger
    public let credentials = CredentialsVersion()
    /// When a token's pending pushes are cut back as they arrive.
    let trim = PendingTrim()
    /// The most tokens a device may hold (`defaultTokensPerDevice`).
    public let tokensPerDevice: Int

    /// `postgres://user:password@host:port/database` (TLS is not used: loopback or a private net).
    public init(url: String, logger: Logger, tokensPerDevice: Int = defaultTokensPerDevice) throws {
        self.tokensPerDevice = max(1, tokensPerDevice)
        guard let components = URLComponents(string: url), ["postgres", "postgresql"].contains(components.scheme),
            let host = components.host, let user = components.user
        else {
            throw PostgresURLProblem(description: "'\(url)' is not postgres://user:password@host:port/database")
        }
        if let port = components.port, !(1...65535).contains(port) {
            // NIO wraps or traps on a port it cannot hold; the pool then retried for ever.
            throw PostgresURLProblem(description: "'\(url)' has port \(port); a port is 1 to 65535")
        }
        let path = components.path.hasPrefix("/") ? String(components.path.dropFirst()) : components.path
        let (port, password, database) = (components.port ?? 5432, components.password, path.isEmpty ? nil : path)
        var configuration = PostgresClient.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: .disable)
        configuration.options.maximumConnections = 20
        // The pool (postgres-nio 1.33) replaces a closed connection only below this minimum: at 0,
        // requests waiting for a connection when PostgreSQL restarted waited for ever (nothing
        // was made for them), and a provider's request with them.
        configuration.options.minimumConnections = 2
        // A connection left inside a transaction (a client that hung between two statements, as
        // a node seemed to after a PostgreSQL restart) would hold its row locks for good, and
        // every read of those pushes would wait on them: the server ends it instead.
        configuration.options.additionalStartupParameters = [("idle_in_transaction_session_timeout", "30s")]
        var listener = PostgresConnection.Configuration(
            host: host, port: port, username: user, password: password, database: database, tls: .disable)
        // Named, so an operator (and a test) can tell it in pg_stat_activity.
        listener.options.additionalStartupParameters = [("application_name", Self.listenerName)]
        listenerConfiguration = listener
        // Its own warnings at error level: it warns once, harmlessly, when the first query waits
        // for `run()` to begin, which `runPool` then `prepare` always races.
        var background = logger
        background.logLevel = max(logger.logLevel, .error)
        client = PostgresClient(configuration: configuration, backgroundLogger: background)
        backgroundLogger = background
        self.logger = logger
    }

    /// Runs the connection pool until cancelled: it must run while the store is used (start it,
    /// then `prepare`, then serve).
    public func runPool() async { await client.run() }

    /// Runs `body` in a transaction; a refusal thrown inside comes out as itself, not wrapped.
    private func transaction<T: Sendable>(_ body: (PostgresConnection) async throws -> sending T) async throws -> T {
        do {
            return try await client.withTransaction(logger: logger, body)
        } catch let error as PostgresTransactionError {
            if let refusal = error.closureError as? RelayRefusal { throw refusal }
            throw error
        }
    }

    /// Creates the tables if they are not there (one node at a time, under an advisory lock). A
    /// schema that is current already is left alone: its statements take each table's locks
    /// (`ALTER TABLE` an exclusive one), and a node starting beside others at work deadlocked
    /// with one of their transactions (seen in the relay's chaos test).
    public func prepare() async throws {
        try await transaction { connection in
            try await connection.query("SELECT pg_advisory_xact_lock(71946219)", logger: logger)
            // What the statements below make, up to each step: a new step goes into this check.
            // A schema one step behind takes that step alone: the rest would take the locks of
            // every table again while older nodes work on.
            var (schema, nowOrNever) = (false, false)
            for try await found in try await connection.query(
                """
                SELECT to_regclass('relay_credentials') IS NOT NULL AND EXISTS (
                    SELECT 1 FROM information_schema.columns
                    WHERE table_schema = current_schema() AND table_name = 'relay_device' AND column_name = 'last_seen_at'),
                EXISTS (
                    SELECT 1 FROM information_schema.columns
                    WHERE table_schema = current_schema() AND table_name = 'relay_push' AND column_name = 'now_or_never')
                """, logger: logger
            ).decode((Bool, Bool).self) { (schema, nowOrNever) = found }
            if schema && nowOrNever { return }
            if schema {
                try await connection.query(Self.nowOrNeverColumn, logger: logger)
                return
            }
            for statement: PostgresQuery in [
                """
                CREATE TABLE IF NOT EXISTS relay_device (
                    id text PRIMARY KEY, secret_hash text NOT NULL, enrolled_at timestamptz NOT NULL,
                    fencing bigint NOT NULL DEFAULT 0, claimed_by text)
                """,
                """
                CREATE TABLE IF NOT EXISTS relay_device_token (
                    token text PRIMARY KEY, device_id text NOT NULL REFERENCES relay_device(id), topic text NOT NULL,
                    registered_at timestamptz NOT NULL, revoked_at timestamptz)
                """,
                """
                CREATE TABLE IF NOT EXISTS relay_provider_key (
                    key_id text PRIMARY KEY, team_id text NOT NULL, topics text NOT NULL, public_key text NOT NULL,
                    added_at timestamptz NOT NULL)
                """,
                """
                CREATE TABLE IF NOT EXISTS relay_push (
                    id bigserial PRIMARY KEY, device_id text NOT NULL REFERENCES relay_device(id), token text NOT NULL,
                    topic text NOT NULL, apns_id text NOT NULL, push_type text NOT NULL, priority int NOT NULL,
                    collapse_id text, expiration timestamptz, payload bytea NOT NULL, accepted_at timestamptz NOT NULL,
                    state text NOT NULL, ended_at timestamptz)
                """,
                "CREATE INDEX IF NOT EXISTS relay_push_pending ON relay_push (device_id, state, id)",
                // The pruner's: ended pushes by when they ended, pending ones by age (partial,
                // so each holds only the rows it is for).
                "CREATE INDEX IF NOT EXISTS relay_push_ended ON relay_push (ended_at) WHERE state <> 'pending'",
                "CREATE INDEX IF NOT EXISTS relay_push_waiting ON relay_push (accepted_at) WHERE state = 'pending'",
                // A token's pending pushes, newest first, for the cut as pushes arrive.
                "CREATE INDEX IF NOT EXISTS relay_push_pending_token ON relay_push (token, id) WHERE state = 'pending'",
                // The pruner forgets tokens revoked long ago; a device at its limit, its oldest.
                "CREATE INDEX IF NOT EXISTS relay_device_token_revoked ON relay_device_token (revoked_at) WHERE revoked_at IS NOT NULL",
                "CREATE INDEX IF NOT EXISTS relay_device_token_device ON relay_device_token (device_id)",
                // The pruner forgets devices enrolled long ago that never connected.
                "CREATE INDEX IF NOT EXISTS relay_device_unclaimed ON relay_device (enrolled_at) WHERE fencing = 0",
                // When the device last connected, or was seen connected by the pruner of the node
                // holding its uplink: one gone longer than `forgetAfter` is forgotten.
                "ALTER TABLE relay_device ADD COLUMN IF NOT EXISTS last_seen_at timestamptz",
                "UPDATE relay_device SET last_seen_at = enrolled_at WHERE last_seen_at IS NULL",
                "CREATE INDEX IF NOT EXISTS relay_device_last_seen ON relay_device (last_seen_at)",
                "CREATE TABLE IF NOT EXISTS relay_credentials (version bigint NOT NULL)",
                "INSERT INTO relay_credentials (version) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM relay_credentials)",
                Self.nowOrNeverColumn,
            ] {
                try await connection.query(statement, logger: logger)
            }
        }
    }

    /// A push sent with `apns-expiration: 0`: the relay gives the device a minute to take it
    /// (`expiration`), and bgd is told it goes now or never.
    private static let nowOrNeverColumn: PostgresQuery =
        "ALTER TABLE relay_push ADD COLUMN IF NOT EXISTS now_or_never boolean NOT NULL DEFAULT false"

    /// Follows what other nodes commit until cancelled or the connection is lost: `onListening`
    /// is called once LISTEN holds (anything committed before it was not heard), `onPush` hears
    /// each device with new pushes; a change of keys or tokens moves `credentials`.
    ///
    /// On a connection of its own rather than one leased from the pool: a listener holds its
    /// connection for good, and after PostgreSQL restarts the pool (postgres-nio 1.33) made one
    /// connection again and gave it to the listener, leaving every provider's request waiting.
    public func follow(
        probing probe: ListenerProbe, on clock: any WallClock, onListening: @escaping @Sendable () -> Void,
        onPush: @escaping @Sendable (String) -> Void
    ) async throws {
        let connection = try await PostgresConnection.connect(
            configuration: listenerConfiguration, id: 0, logger: backgroundLogger)
        let (credentials, logger) = (self.credentials, backgroundLogger)
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    try await connection.listen(on: "bgrelay") { notifications in
                        onListening()
                        for try await notification in notifications {
                            let payload = notification.payload
                            if payload.hasPrefix("push:") {
                                onPush(String(payload.dropFirst(5)))
                            } else if payload.hasPrefix("credentials:"), let version = Int(payload.dropFirst(12)) {
                                credentials.advance(to: version)
                            }
                        }
                    }
                }
                // A listening connection only reads: one the database no longer serves (its
                // backend stuck, the host gone without a reset, a NAT that dropped it) would
                // hear nothing for good, and no error would ever say so. A query on it, bounded,
                // every so often: one that does not answer ends it, and the node listens anew.
                group.addTask {
                    while true {
                        try await clock.sleep(for: probe.every)
                        _ = try await clock.within(probe.within) {
                            try await connection.query("SELECT 1", logger: logger).collect()
                        }
                    }
                }
                try await group.next()
                group.cancelAll()
            }
        } catch {
            try? await connection.close()
            throw error
        }
        try? await connection.close()
    }

    /// The listening connection's application_name.
    public static let listenerName = "bgrelay-listener"

    /// How often the listening connection is checked, and how long its answer may take.
    public struct ListenerProbe: Sendable {
        public var every: Duration
        public var within: Duration

        public init(every: Duration = .seconds(60), within: Duration = .seconds(10)) {
            self.every = every
            self.within = within
        }
    }

    // MARK: Devices and tokens

    public func enroll(now: Date) async throws -> (device: String, secret: String) {
        let device = SQLiteRelayStore.randomHex(16)
        let secret = SQLiteRelayStore.randomHex(32)
        let hash = SQLiteRelayStore.hash(secret)
        try await client.query(
            "INSERT INTO relay_device (id, secret_hash, enrolled_at, last_seen_at) VALUES (\(device), \(hash), \(now), \(now))",
            logger: logger)
        return (device, secret)
    }

    public func authenticate(device: String, secret: String) async throws -> Bool {
        let rows = try await client.query("SELECT secret_hash FROM relay_device WHERE id = \(device)", logger: logger)
        for try await stored in rows.decode(String.self) {
            return SQLiteRelayStore.sameHash(SQLiteRelayStore.hash(secret), stored)
        }
        return false
    }

    public func register(token: String, topic: String, device: String, now: Date) async throws {
        let token = token.lowercased()
        guard SQLiteRelayStore.isToken(token) else { throw RelayRefusal.malformedToken(token) }
        guard AppID(rawValue: topic) != nil else { throw RelayRefusal.malformedTopic(topic) }
        let logger = self.logger
        let version: Int? = try await transaction { connection in
            let inserted = try await connection.query(
                """
                INSERT INTO relay_device_token (token, device_id, topic, registered_at)
                VALUES (\(token), \(device), \(topic), \(now)) ON CONFLICT (token) DO NOTHING RETURNING token
                """, logger: logger
            ).collect()
            guard inserted.isEmpty else {
                try await Self.makeRoom(for: device, limit: tokensPerDevice, connection, logger: logger)
                return try await Self.bumpCredentials(connection, logger: logger)
            }
            for try await (owner, registered) in try await connection.query(
                "SELECT device_id, topic FROM relay_device_token WHERE token = \(token)", logger: logger
            ).decode((String, String).self) {
                guard owner == device else { throw RelayRefusal.tokenTaken(token) }
                guard registered == topic else { throw RelayRefusal.topicMismatch(token) }
            }
            return nil
        }
        if let version { credentials.advance(to: version) }
    }

    /// After a new token of `device` went in: at most `limit` tokens stay, the oldest revoked
    /// going first; all active, the registration is refused (and rolled back). The device's
    /// row is locked first, so two registrations of one device count one after the other.
    static func makeRoom(for device: String, limit: Int, _ connection: PostgresConnection, logger: Logger) async throws
    {
        try await connection.query("SELECT id FROM relay_device WHERE id = \(device) FOR UPDATE", logger: logger)
        var held = 0
        for try await count in try await connection.query(
            "SELECT COUNT(*) FROM relay_device_token WHERE device_id = \(device)", logger: logger
        ).decode(Int.self) { held = count }
        guard held > limit else { return }
        var removed = 0
        for try await _ in try await connection.query(
            """
            DELETE FROM relay_device_token WHERE token IN (
                SELECT token FROM relay_device_token WHERE device_id = \(device) AND revoked_at IS NOT NULL
                ORDER BY revoked_at, registered_at LIMIT \(held - limit))
            RETURNING token
            """, logger: logger
        ).decode(String.self) { removed += 1 }
        guard held - removed <= limit else { throw RelayRefusal.tooManyTokens(limit) }
    }

    public func revoke(token: String, device: String, at: Date) async throws {
        let token = token.lowercased()
        // As a registration's: a token with NUL in it ended the device's session on PostgreSQL.
        guard SQLiteRelayStore.isToken(token) else { throw RelayRefusal.malformedToken(token) }
        let logger = self.logger
        let version = try await transaction { connection -> Int? in
            var owner: String?
            for try await found in try await connection.query(
                "SELECT device_id FROM relay_device_token WHERE token = \(token) FOR UPDATE", logger: logger
            ).decode(String.self) { owner = found }
            guard let owner else { return nil }  // nobody registered it: nothing to revoke
            guard owner == device else { throw RelayRefusal.unknownToken(token) }
            try await connection.query(
                "UPDATE relay_device_token SET revoked_at = \(at) WHERE token = \(token) AND revoked_at IS NULL",
                logger: logger)
            try await connection.query(
                "UPDATE relay_push SET state = 'revoked', ended_at = \(at) WHERE token = \(token) AND state = 'pending'",
                logger: logger)
            return try await Self.bumpCredentials(connection, logger: logger)
        }
        if let version { credentials.advance(to: version) }
    }

    public func tokenOwner(_ token: String) async throws -> RelayTokenOwner? {
        let token = token.lowercased()
        for try await (device, topic, revokedAt) in try await client.query(
            "SELECT device_id, topic, revoked_at FROM relay_device_token WHERE token = \(token)", logger: logger
        ).decode((String, String, Date?).self) {
            return RelayTokenOwner(device: device, topic: topic, revokedAt: revokedAt)
        }
        return nil
    }

    // MARK: Provider keys

    public func addProviderKey(_ key: ProviderKeyRegistration, now: Date) async throws {
        let topics = String(decoding: try JSONEncoder().encode(key.topics), as: UTF8.self)
        let logger = self.logger
        let version = try await transaction { connection in
            try await connection.query(
                """
                INSERT INTO relay_provider_key (key_id, team_id, topics, public_key, added_at)
                VALUES (\(key.keyID), \(key.teamID), \(topics), \(key.publicKeyPEM), \(now))
                ON CONFLICT (key_id) DO UPDATE SET team_id = excluded.team_id, topics = excluded.topics,
                    public_key = excluded.public_key, added_at = excluded.added_at
                """, logger: logger)
            return try await Self.bumpCredentials(connection, logger: logger)
        }
        credentials.advance(to: version)
    }

    public func removeProviderKey(_ keyID: String) async throws -> Bool {
        let logger = self.logger
        let (removed, version) = try await transaction { connection in
            let rows = try await connection.query(
                "DELETE FROM relay_provider_key WHERE key_id = \(keyID) RETURNING key_id", logger: logger
            ).collect()
            return (!rows.isEmpty, try await Self.bumpCredentials(connection, logger: logger))
        }
        credentials.advance(to: version)
        return removed
    }

    public func providerKey(_ keyID: String) async throws -> ProviderKeyRegistration? {
        try await keys(where: keyID).first
    }

    public func providerKeys() async throws -> [ProviderKeyRegistration] { try await keys(where: nil) }

    private func keys(where keyID: String?) async throws -> [ProviderKeyRegistration] {
        let rows = try await client.query(
            """
            SELECT key_id, team_id, topics, public_key, added_at FROM relay_provider_key
            WHERE \(keyID)::text IS NULL OR key_id = \(keyID) ORDER BY key_id
            """, logger: logger)
        var keys: [ProviderKeyRegistration] = []
        for try await (id, team, topics, publicKey, added) in rows.decode((String, String, String, String, Date).self) {
            let list = (try? JSONDecoder().decode([String].self, from: Data(topics.utf8))) ?? []
            keys.append(
                ProviderKeyRegistration(keyID: id, teamID: team, topics: list, publicKeyPEM: publicKey, addedAt: added))
        }
        return keys
    }

    public func credentialsVersion() async throws -> Int {
        for try await version in try await client.query("SELECT version FROM relay_credentials", logger: logger)
            .decode(Int.self)
        {
            return version
        }
        return 0
    }

    /// Bumps the version in the transaction that changed keys or tokens, and tells every node.
    private static func bumpCredentials(_ connection: PostgresConnection, logger: Logger) async throws -> Int {
        var version = 0
        for try await value in try await connection.query(
            "UPDATE relay_credentials SET version = version + 1 RETURNING version", logger: logger
        ).decode(Int.self) { version = value }
        try await connection.query("SELECT pg_notify('bgrelay', \("credentials:\(version)"))", logger: logger)
        return version
    }

    // MARK: Pushes

    public func commit(
        _ pushes: [AcceptedPush<RelayTokenOwner>], now: Date, connected: @escaping @Sendable (String) -> Bool
    ) async throws -> Set<String> {
        let logger = self.logger
        return try await transaction { connection in
            // One commit at a time per device, topic and collapse id, across nodes: under READ
            // COMMITTED two at once each replaced only what the other had not yet committed, and
            // both pushes waited. Taken in one order, so two groups never wait on each other.
            let collapseKeys = Set(
                pushes.compactMap { push in
                    push.collapseID.map { push.owner.device + "\n" + push.owner.topic + "\n" + $0 }  // no NUL in text
                })
            if !collapseKeys.isEmpty {
                try await connection.query(
                    """
                    SELECT pg_advisory_xact_lock(hashtextextended(key, 0))
                    FROM (SELECT key FROM unnest(\(collapseKeys.sorted())::text[]) AS key ORDER BY key) AS sorted
                    """, logger: logger)
            }
            var devices: Set<String> = []
            var rows:
                [(push: AcceptedPush<RelayTokenOwner>, expiration: Date?, nowOrNever: Bool, state: RelayPushState)] =
                    []
            /// The row of this group that is pending for each device, topic and collapse id: a
            /// later one in the same group replaces it, as it would a committed one.
            var collapsing: [String: Int] = [:]
            for push in pushes {
                let device = push.owner.device
                var expiration = push.expiration
                var state = RelayPushState.pending
                let nowOrNever = expiration?.timeIntervalSince1970 == 0
                if nowOrNever {
                    // Now or never. Another node may hold the device: "connected" is this
                    // node's view, so a device held elsewhere gets a minute too.
                    expiration = now.addingTimeInterval(60)
                    if !connected(device), try await !Self.isClaimed(device, connection: connection, logger: logger) {
                        state = .expired
                    }
                }
                // Only a push that will wait takes the place of the one waiting: a now-or-never
                // push that ends at once displaces nothing (APNs does not store it).
                if let collapseID = push.collapseID, state == .pending {
                    try await connection.query(
                        """
                        UPDATE relay_push SET state = 'replaced', ended_at = \(now)
                        WHERE device_id = \(device) AND topic = \(push.owner.topic) AND collapse_id = \(collapseID)
                            AND state = 'pending'
                        """, logger: logger)
                    let key = device + "\u{0}" + push.owner.topic + "\u{0}" + collapseID
                    if let earlier = collapsing[key], rows[earlier].state == .pending {
                        rows[earlier].state = .replaced
                    }
                    collapsing[key] = rows.count
                }
                rows.append((push, expiration, nowOrNever, state))
                if state == .pending { devices.insert(device) }
            }
            // One statement for the group (a round trip per push held a node to ~2k/s).
            for chunk in stride(from: 0, to: rows.count, by: 400) {
                var sql = """
                    INSERT INTO relay_push (device_id, token, topic, apns_id, push_type, priority, collapse_id,
                        expiration, now_or_never, payload, accepted_at, state, ended_at) VALUES
                    """
                var binds = PostgresBindings(capacity: 13 * 400)
                for (index, row) in rows[chunk..<min(chunk + 400, rows.count)].enumerated() {
                    let first = index * 13
                    sql +=
                        (index == 0 ? " " : ", ") + "(" + (1...13).map { "$\(first + $0)" }.joined(separator: ", ")
                        + ")"
                    try binds.append(row.push.owner.device)
                    try binds.append(row.push.deviceToken)
                    try binds.append(row.push.owner.topic)
                    try binds.append(row.push.apnsID)
                    try binds.append(row.push.pushType)
                    try binds.append(row.push.priority)
                    try binds.append(row.push.collapseID)
                    try binds.append(row.expiration)
                    try binds.append(row.nowOrNever)
                    try binds.append(row.push.payload)
                    try binds.append(now)
                    try binds.append(row.state.rawValue)
                    try binds.append(row.state == .pending ? nil : now)
                }
                try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger)
            }
            // A token past its pending cap keeps its newest, as the pruner's pass would.
            for token in trim.due(rows.filter { $0.state == .pending }.map(\.push.deviceToken)) {
                try await connection.query(
                    """
                    UPDATE relay_push SET state = 'replaced', ended_at = \(now)
                    WHERE state = 'pending' AND token = \(token) AND id <= (
                        SELECT id FROM relay_push WHERE token = \(token) AND state = 'pending'
                        ORDER BY id DESC OFFSET \(pendingPerToken) LIMIT 1)
                    """, logger: logger)
            }
            for device in devices {
                try await connection.query("SELECT pg_notify('bgrelay', \("push:" + device))", logger: logger)
            }
            return devices
        }
    }

    private static func isClaimed(_ device: String, connection: PostgresConnection, logger: Logger) async throws -> Bool
    {
        for try await claimedBy in try await connection.query(
            "SELECT claimed_by FROM relay_device WHERE id = \(device)", logger: logger
        ).decode(String?.self) {
            return claimedBy != nil
        }
        return false
    }

    public func claim(device: String, node: String, now: Date) async throws -> Int64 {
        for try await fencing in try await client.query(
            "UPDATE relay_device SET fencing = fencing + 1, claimed_by = \(node), last_seen_at = \(now) WHERE id = \(device) RETURNING fencing",
            logger: logger
        ).decode(Int64.self) {
            return fencing
        }
        return 0
    }

    /// Locks the device's row and throws `superseded` unless `fencing` is its newest claim.
    private static func checkClaim(
        _ device: String, fencing: Int64, connection: PostgresConnection, logger: Logger
    ) async throws {
        var current: Int64?
        for try await value in try await connection.query(
            "SELECT fencing FROM relay_device WHERE id = \(device) FOR SHARE", logger: logger
        ).decode(Int64.self) { current = value }
        guard current == fencing else { throw RelayRefusal.superseded }
    }

    public func pendingPushes(
        of device: String, excluding sent: Set<Int64>, fencing: Int64, now: Date
    )
        async throws -> [RelayedPush]
    {
        let logger = self.logger
        return try await transaction { connection in
            try await Self.checkClaim(device, fencing: fencing, connection: connection, logger: logger)
            try await connection.query(
                """
                UPDATE relay_push SET state = 'expired', ended_at = \(now)
                WHERE device_id = \(device) AND state = 'pending' AND expiration IS NOT NULL AND expiration < \(now)
                    AND id <> ALL(\(Array(sent)))
                """, logger: logger)
            // No row locks: the device's row (FOR SHARE) and the fencing token keep sessions
            // apart. SKIP LOCKED passed over a row another transaction held (a commit replacing
            // it, the pruner) and stranded it if that transaction rolled back, with nothing to
            // ring the session again; FOR UPDATE waited on such rows, and could deadlock with a
            // commit that locks a device's rows in another order. A row being replaced as it is
            // read may still be sent: the device gets it as well as its replacement, and the
            // relay's record says replaced (its acknowledgement changes nothing).
            let rows = try await connection.query(
                """
                SELECT id, token, topic, apns_id, push_type, priority, collapse_id, expiration, now_or_never, payload
                FROM relay_push
                WHERE device_id = \(device) AND state = 'pending' AND id <> ALL(\(Array(sent)))
                ORDER BY id LIMIT \(pendingBatch)
                """, logger: logger)
            var pushes: [RelayedPush] = []
            for try await (id, token, topic, apnsID, type, priority, collapse, expiration, nowOrNever, payload)
                in rows.decode((Int64, String, String, String, String, Int, String?, Date?, Bool, Data).self)
            {
                pushes.append(
                    RelayedPush(
                        seq: id, token: token, topic: topic, apnsID: apnsID, pushType: type, priority: priority,
                        collapseID: collapse,
                        expirationMilliseconds: RelayedPush.expirationMilliseconds(expiration, nowOrNever: nowOrNever),
                        payload: payload))
            }
            return pushes
        }
    }

    public func deliver(_ seqs: [Int64], device: String, fencing: Int64, now: Date) async throws -> [Date] {
        try await transaction { connection in
            try await Self.checkClaim(device, fencing: fencing, connection: connection, logger: logger)
            var accepted: [Date] = []
            for try await acceptedAt in try await connection.query(
                """
                UPDATE relay_push SET state = 'delivered', ended_at = \(now)
                WHERE id = ANY(\(seqs)) AND device_id = \(device) AND state = 'pending' RETURNING accepted_at
                """, logger: logger
            ).decode(Date.self) {
                accepted.append(acceptedAt)
            }
            return accepted
        }
    }

    public func markSeen(_ devices: [String], now: Date) async throws {
        for start in stride(from: 0, to: devices.count, by: pruneBatch) {
            let batch = Array(devices[start..<min(start + pruneBatch, devices.count)])
            try await client.query(
                "UPDATE relay_device SET last_seen_at = \(now) WHERE id = ANY(\(batch))", logger: logger)
        }
    }

    public func prune(
        now: Date, holdFor: TimeInterval, keepEnded: TimeInterval, forgetAfter: TimeInterval
    )
        async throws -> RelayPruneReport
    {
        var report = RelayPruneReport()
        let (graceEnd, heldSince, endedBefore) = (
            now.addingTimeInterval(-expirationGrace), now.addingTimeInterval(-holdFor),
            now.addingTimeInterval(-keepEnded)
        )
        // SKIP LOCKED: a push a session is reading or acknowledging is its business this moment.
        for try await _ in try await client.query(
            """
            UPDATE relay_push SET state = 'expired', ended_at = \(now) WHERE id IN (
                SELECT id FROM relay_push WHERE state = 'pending'
                    AND (expiration < \(graceEnd) OR accepted_at < \(heldSince))
                FOR UPDATE SKIP LOCKED)
            RETURNING id
            """, logger: logger
        ).decode(Int64.self) {
            report.expired += 1
        }
        for try await _ in try await client.query(
            """
            UPDATE relay_push SET state = 'replaced', ended_at = \(now) WHERE state = 'pending' AND id IN (
                SELECT id FROM (
                    SELECT id, row_number() OVER (PARTITION BY token ORDER BY id DESC) AS newer
                    FROM relay_push WHERE state = 'pending') AS ranked
                WHERE newer > \(pendingPerToken))
            RETURNING id
            """, logger: logger
        ).decode(Int64.self) {
            report.replaced += 1
        }
        while true {
            var deleted = 0
            for try await _ in try await client.query(
                """
                DELETE FROM relay_push WHERE id IN (
                    SELECT id FROM relay_push WHERE state <> 'pending' AND ended_at < \(endedBefore) LIMIT \(pruneBatch))
                RETURNING id
                """, logger: logger
            ).decode(Int64.self) {
                deleted += 1
            }
            report.deleted += deleted
            if deleted < pruneBatch { break }
        }
        while true {
            // A device's ended pushes beyond its newest `endedPerDevice`, a batch at a time.
            var deleted = 0
            for try await count in try await client.query(
                """
                WITH gone AS (
                    DELETE FROM relay_push WHERE id IN (
                        SELECT id FROM (
                            SELECT id, row_number() OVER (PARTITION BY device_id ORDER BY id DESC) AS newer
                            FROM relay_push WHERE state <> 'pending') AS ranked
                        WHERE newer > \(endedPerDevice) LIMIT \(pruneBatch))
                    RETURNING 1)
                SELECT count(*) FROM gone
                """, logger: logger
            ).decode(Int64.self) {
                deleted = Int(count)
            }
            report.deleted += deleted
            if deleted < pruneBatch { break }
        }
        let logger = self.logger
        while true {
            let (forgotten, version) = try await transaction { connection -> (Int, Int?) in
                var forgotten = 0
                for try await _ in try await connection.query(
                    """
                    DELETE FROM relay_device_token WHERE token IN (
                        SELECT token FROM relay_device_token WHERE revoked_at < \(endedBefore) LIMIT \(pruneBatch))
                    RETURNING token
                    """, logger: logger
                ).decode(String.self) {
                    forgotten += 1
                }
                guard forgotten > 0 else { return (0, nil) }
                // With the change: every node's provider side holds owners, and a forgotten
                // token must not answer 410.
                return (forgotten, try await Self.bumpCredentials(connection, logger: logger))
            }
            if let version { credentials.advance(to: version) }
            report.tokensForgotten += forgotten
            if forgotten < pruneBatch { break }
        }
        while true {
            // A claim racing this waits on the row's lock and then finds no device: its session
            // ends, and the device's next connection is refused (401, enroll again).
            var forgotten = 0
            for try await _ in try await client.query(
                """
                DELETE FROM relay_device WHERE fencing = 0 AND id IN (
                    SELECT id FROM relay_device d WHERE fencing = 0 AND enrolled_at < \(heldSince)
                        AND NOT EXISTS (SELECT 1 FROM relay_device_token t WHERE t.device_id = d.id)
                        AND NOT EXISTS (SELECT 1 FROM relay_push p WHERE p.device_id = d.id)
                    LIMIT \(pruneBatch) FOR UPDATE SKIP LOCKED)
                RETURNING id
                """, logger: logger
            ).decode(String.self) {
                forgotten += 1
            }
            report.devicesForgotten += forgotten
            if forgotten < pruneBatch { break }
        }
        let goneSince = now.addingTimeInterval(-forgetAfter)
        while true {
            // The rows locked first, as a claim does: a device connecting this moment is its
            // session's, and is skipped.
            let (forgotten, tokens, version) = try await transaction { connection -> (Int, Int, Int?) in
                var gone: [String] = []
                for try await id in try await connection.query(
                    """
                    SELECT id FROM relay_device WHERE last_seen_at < \(goneSince) LIMIT \(pruneBatch) FOR UPDATE SKIP LOCKED
                    """, logger: logger
                ).decode(String.self) {
                    gone.append(id)
                }
                guard !gone.isEmpty else { return (0, 0, nil) }
                try await connection.query("DELETE FROM relay_push WHERE device_id = ANY(\(gone))", logger: logger)
                var tokens = 0
                for try await _ in try await connection.query(
                    "DELETE FROM relay_device_token WHERE device_id = ANY(\(gone)) RETURNING token", logger: logger
                ).decode(String.self) {
                    tokens += 1
                }
                try await connection.query("DELETE FROM relay_device WHERE id = ANY(\(gone))", logger: logger)
                // With the change: every node's provider side holds the tokens' owners.
                guard tokens > 0 else { return (gone.count, 0, nil) }
                return (gone.count, tokens, try await Self.bumpCredentials(connection, logger: logger))
            }
            if let version { credentials.advance(to: version) }
            report.devicesForgotten += forgotten
            report.tokensForgotten += tokens
            if forgotten < pruneBatch { break }
        }
        return report
    }

    public func release(device: String, fencing: Int64) async throws {
        try await client.query(
            "UPDATE relay_device SET claimed_by = NULL WHERE id = \(device) AND fencing = \(fencing)", logger: logger)
    }

    /// The node whose uplink holds the device's newest claim (for operators and checkers), nil
    /// while none does.
    public func claimHolder(of device: String) async throws -> String? {
        for try await holder in try await client.query(
            "SELECT claimed_by FROM relay_device WHERE id = \(device)", logger: logger
        ).decode(String?.self) {
            return holder
        }
        return nil
    }

    public func pushCounts() async throws -> [RelayPushState: Int] {
        var counts: [RelayPushState: Int] = [:]
        for try await (state, count) in try await client.query(
            "SELECT state, COUNT(*) FROM relay_push GROUP BY state", logger: logger
        ).decode((String, Int).self) {
            if let state = RelayPushState(rawValue: state) { counts[state] = count }
        }
        return counts
    }

    public func pushLog() async throws -> [(seq: Int64, device: String, apnsID: String, state: RelayPushState)] {
        var log: [(seq: Int64, device: String, apnsID: String, state: RelayPushState)] = []
        for try await (id, device, apnsID, state) in try await client.query(
            "SELECT id, device_id, apns_id, state FROM relay_push ORDER BY id", logger: logger
        ).decode((Int64, String, String, String).self) {
            log.append((id, device, apnsID, RelayPushState(rawValue: state) ?? .pending))
        }
        return log
    }
}

/// A `--database` URL that is not one.
public struct PostgresURLProblem: Error, CustomStringConvertible {
    public let description: String
}
