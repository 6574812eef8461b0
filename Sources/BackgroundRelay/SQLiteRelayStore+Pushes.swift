import BackgroundGateway
import BackgroundModel
import Foundation
import GRDB

/// How a push the relay accepted ended, or that it has not yet.
public enum RelayPushState: String, Sendable, CaseIterable {
    /// Waiting for its device, or sent and not yet acknowledged.
    case pending
    /// The device committed it to its own queue.
    case delivered
    /// Its `apns-expiration` passed before the device took it.
    case expired
    /// A newer push to the same device, topic and collapse id took its place.
    case replaced
    /// Its token was revoked before the device took it.
    case revoked
}

extension SQLiteRelayStore {
    /// Commits accepted pushes in one transaction. A push with a collapse id replaces the pending
    /// one with the same device, topic and collapse id; `apns-expiration: 0` ("now or never")
    /// to a device not connected ends at once as expired. Returns the devices with new pushes.
    public func commit(
        _ pushes: [AcceptedPush<RelayTokenOwner>], now: Date, connected: @escaping @Sendable (String) -> Bool
    ) async throws -> Set<String> {
        try await database.write { [trim] db in
            var devices: Set<String> = []
            var pendingTokens: [String] = []
            for push in pushes {
                let device = push.owner.device
                var expiration = push.expiration
                var state = RelayPushState.pending
                let nowOrNever = expiration?.timeIntervalSince1970 == 0
                if nowOrNever {
                    // Now or never: a device that is connected has a minute to take it.
                    if connected(device) {
                        expiration = now.addingTimeInterval(60)
                    } else {
                        state = .expired
                    }
                }
                // Only a push that will wait takes the place of the one waiting: a now-or-never
                // push that ends at once displaces nothing (APNs does not store it).
                if let collapseID = push.collapseID, state == .pending {
                    try db.execute(
                        sql: """
                            UPDATE push SET state = 'replaced', endedAt = ?
                            WHERE deviceId = ? AND topic = ? AND collapseId = ? AND state = 'pending'
                            """, arguments: [now, device, push.owner.topic, collapseID])
                }
                try db.execute(
                    sql: """
                        INSERT INTO push(deviceId, token, topic, apnsId, pushType, priority, collapseId, expiration,
                            nowOrNever, payload, acceptedAt, state, endedAt)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                        """,
                    arguments: [
                        device, push.deviceToken, push.owner.topic, push.apnsID, push.pushType, push.priority,
                        push.collapseID, expiration, nowOrNever, push.payload, now, state.rawValue,
                        state == .pending ? nil : now,
                    ])
                if state == .pending {
                    devices.insert(device)
                    pendingTokens.append(push.deviceToken)
                }
            }
            // A token past its pending cap keeps its newest, as the pruner's pass would.
            for token in trim.due(pendingTokens) {
                try db.execute(
                    sql: """
                        UPDATE push SET state = 'replaced', endedAt = ?
                        WHERE state = 'pending' AND token = ? AND id <= (
                            SELECT id FROM push WHERE token = ? AND state = 'pending'
                            ORDER BY id DESC LIMIT 1 OFFSET ?)
                        """, arguments: [now, token, token, pendingPerToken])
            }
            return devices
        }
    }

    public func claim(device: String, node: String, now: Date) async throws -> Int64 {
        try await database.write { db in
            try db.execute(
                sql: "UPDATE device SET fencing = fencing + 1, claimedBy = ?, lastSeenAt = ? WHERE id = ?",
                arguments: [node, now, device])
            return try Int64.fetchOne(db, sql: "SELECT fencing FROM device WHERE id = ?", arguments: [device]) ?? 0
        }
    }

    public func release(device: String, fencing: Int64) async throws {
        try await database.write { db in
            try db.execute(
                sql: "UPDATE device SET claimedBy = NULL WHERE id = ? AND fencing = ?", arguments: [device, fencing])
        }
    }

    /// Throws `superseded` unless `fencing` is the device's newest claim.
    private static func checkClaim(_ db: Database, device: String, fencing: Int64) throws {
        let current = try Int64.fetchOne(db, sql: "SELECT fencing FROM device WHERE id = ?", arguments: [device])
        guard current == fencing else { throw RelayRefusal.superseded }
    }

    /// The device's pending pushes but those in `sent`, oldest first; those whose expiration
    /// passed end as expired now instead — not those in `sent`, which the device may be
    /// acknowledging (the pruner gives them a minute's grace).
    public func pendingPushes(
        of device: String, excluding sent: Set<Int64>, fencing: Int64, now: Date
    )
        async throws -> [RelayedPush]
    {
        try await database.write { db in
            try Self.checkClaim(db, device: device, fencing: fencing)
            // json_each: one argument however many were sent (a `NOT IN` list would need one each).
            let sentList = "[" + sent.map(String.init).joined(separator: ",") + "]"
            try db.execute(
                sql: """
                    UPDATE push SET state = 'expired', endedAt = ?
                    WHERE deviceId = ? AND state = 'pending' AND expiration IS NOT NULL AND expiration < ?
                        AND id NOT IN (SELECT value FROM json_each(?))
                    """, arguments: [now, device, now, sentList])
            return try Row.fetchAll(
                db,
                sql: """
                    SELECT * FROM push WHERE deviceId = ? AND state = 'pending'
                        AND id NOT IN (SELECT value FROM json_each(?)) ORDER BY id LIMIT ?
                    """, arguments: [device, sentList, pendingBatch]
            ).map { row in
                let expiration: Date? = try row.decode(forColumn: "expiration")
                return RelayedPush(
                    seq: row["id"], token: row["token"], topic: row["topic"], apnsID: row["apnsId"],
                    pushType: row["pushType"], priority: row["priority"], collapseID: row["collapseId"],
                    expirationMilliseconds: RelayedPush.expirationMilliseconds(
                        expiration, nowOrNever: row["nowOrNever"]),
                    payload: row["payload"])
            }
        }
    }

    public func deliver(_ seqs: [Int64], device: String, fencing: Int64, now: Date) async throws -> [Date] {
        try await database.write { db in
            try Self.checkClaim(db, device: device, fencing: fencing)
            var accepted: [Date] = []
            for seq in seqs {
                guard
                    let acceptedAt = try Date.fetchOne(
                        db, sql: "SELECT acceptedAt FROM push WHERE id = ? AND deviceId = ? AND state = 'pending'",
                        arguments: [seq, device])
                else { continue }
                try db.execute(
                    sql: "UPDATE push SET state = 'delivered', endedAt = ? WHERE id = ?", arguments: [now, seq])
                accepted.append(acceptedAt)
            }
            return accepted
        }
    }

    public func markSeen(_ devices: [String], now: Date) async throws {
        for start in stride(from: 0, to: devices.count, by: pruneBatch) {
            let batch = devices[start..<min(start + pruneBatch, devices.count)]
            try await database.write { db in
                try db.execute(
                    sql: "UPDATE device SET lastSeenAt = ? WHERE id IN (\(databaseQuestionMarks(count: batch.count)))",
                    arguments: StatementArguments([now] + batch.map { $0 as any DatabaseValueConvertible }))
            }
        }
    }

    public func prune(
        now: Date, holdFor: TimeInterval, keepEnded: TimeInterval, forgetAfter: TimeInterval
    )
        async throws -> RelayPruneReport
    {
        var report = RelayPruneReport()
        report.expired = try await database.write { db in
            try db.execute(
                sql: """
                    UPDATE push SET state = 'expired', endedAt = ?
                    WHERE state = 'pending' AND (expiration < ? OR acceptedAt < ?)
                    """,
                arguments: [
                    now, now.addingTimeInterval(-expirationGrace), now.addingTimeInterval(-holdFor),
                ])
            return db.changesCount
        }
        report.replaced = try await database.write { db in
            try db.execute(
                sql: """
                    UPDATE push SET state = 'replaced', endedAt = ? WHERE state = 'pending' AND id IN (
                        SELECT id FROM (
                            SELECT id, row_number() OVER (PARTITION BY token ORDER BY id DESC) AS newer
                            FROM push WHERE state = 'pending')
                        WHERE newer > ?)
                    """,
                arguments: [now, pendingPerToken])
            return db.changesCount
        }
        while true {
            let deleted = try await database.write { db in
                try db.execute(
                    sql: """
                        DELETE FROM push WHERE id IN (
                            SELECT id FROM push WHERE state != 'pending' AND endedAt < ? LIMIT ?)
                        """, arguments: [now.addingTimeInterval(-keepEnded), pruneBatch])
                return db.changesCount
            }
            report.deleted += deleted
            if deleted < pruneBatch { break }
        }
        while true {
            // A device's ended pushes beyond its newest `endedPerDevice`, a batch at a time.
            let deleted = try await database.write { db in
                try db.execute(
                    sql: """
                        DELETE FROM push WHERE id IN (
                            SELECT id FROM (
                                SELECT id, row_number() OVER (PARTITION BY deviceId ORDER BY id DESC) AS newer
                                FROM push WHERE state != 'pending')
                            WHERE newer > ? LIMIT ?)
                        """,
                    arguments: [endedPerDevice, pruneBatch])
                return db.changesCount
            }
            report.deleted += deleted
            if deleted < pruneBatch { break }
        }
        while true {
            let (forgotten, version) = try await database.write { db -> (Int, Int?) in
                try db.execute(
                    sql: """
                        DELETE FROM deviceToken WHERE token IN (
                            SELECT token FROM deviceToken WHERE revokedAt < ? LIMIT ?)
                        """, arguments: [now.addingTimeInterval(-keepEnded), pruneBatch])
                let forgotten = db.changesCount
                guard forgotten > 0 else { return (0, nil) }
                // With the change: the provider side's caches hold owners, and a forgotten token
                // must not answer 410.
                try Self.bumpCredentials(db)
                return (forgotten, try Int.fetchOne(db, sql: "SELECT version FROM credentials"))
            }
            if let version { credentials.advance(to: version) }
            report.tokensForgotten += forgotten
            if forgotten < pruneBatch { break }
        }
        while true {
            let forgotten = try await database.write { db in
                try db.execute(
                    sql: """
                        DELETE FROM device WHERE id IN (
                            SELECT id FROM device WHERE fencing = 0 AND enrolledAt < ?
                                AND NOT EXISTS (SELECT 1 FROM deviceToken WHERE deviceId = device.id)
                                AND NOT EXISTS (SELECT 1 FROM push WHERE deviceId = device.id)
                            LIMIT ?)
                        """, arguments: [now.addingTimeInterval(-holdFor), pruneBatch])
                return db.changesCount
            }
            report.devicesForgotten += forgotten
            if forgotten < pruneBatch { break }
        }
        while true {
            let (forgotten, tokens, version) = try await database.write { db -> (Int, Int, Int?) in
                let gone = try String.fetchAll(
                    db, sql: "SELECT id FROM device WHERE lastSeenAt < ? LIMIT ?",
                    arguments: [now.addingTimeInterval(-forgetAfter), pruneBatch])
                guard !gone.isEmpty else { return (0, 0, nil) }
                let ids = databaseQuestionMarks(count: gone.count)
                try db.execute(sql: "DELETE FROM push WHERE deviceId IN (\(ids))", arguments: StatementArguments(gone))
                try db.execute(
                    sql: "DELETE FROM deviceToken WHERE deviceId IN (\(ids))", arguments: StatementArguments(gone))
                let tokens = db.changesCount
                try db.execute(sql: "DELETE FROM device WHERE id IN (\(ids))", arguments: StatementArguments(gone))
                // With the change: the provider side's caches hold the tokens' owners.
                guard tokens > 0 else { return (gone.count, 0, nil) }
                try Self.bumpCredentials(db)
                return (gone.count, tokens, try Int.fetchOne(db, sql: "SELECT version FROM credentials"))
            }
            if let version { credentials.advance(to: version) }
            report.devicesForgotten += forgotten
            report.tokensForgotten += tokens
            if forgotten < pruneBatch { break }
        }
        return report
    }

    /// How many pushes stand in each state.
    public func pushCounts() async throws -> [RelayPushState: Int] {
        try await database.read { db in
            var counts: [RelayPushState: Int] = [:]
            for row in try Row.fetchAll(db, sql: "SELECT state, COUNT(*) AS n FROM push GROUP BY state") {
                if let state = RelayPushState(rawValue: row["state"]) { counts[state] = row["n"] }
            }
            return counts
        }
    }

    /// Every push the relay accepted, oldest first, with its state (for checkers and `bgrelay`).
    public func pushLog() async throws -> [(seq: Int64, device: String, apnsID: String, state: RelayPushState)] {
        try await database.read { db in
            try Row.fetchAll(db, sql: "SELECT id, deviceId, apnsId, state FROM push ORDER BY id").map {
                ($0["id"], $0["deviceId"], $0["apnsId"], RelayPushState(rawValue: $0["state"]) ?? .pending)
            }
        }
    }
}
