import BackgroundGateway
import BackgroundModel
import Crypto
import Foundation
import GRDB

/// Why the relay refused an uplink frame or an enrollment; nothing changed.
public enum RelayRefusal: Error, Equatable, CustomStringConvertible {
    /// The token is bound to another device.
    case tokenTaken(String)
    /// The token was registered for another topic.
    case topicMismatch(String)
    /// Not 64 hex digits, or not a reverse-DNS topic.
    case malformedToken(String)
    case malformedTopic(String)
    /// This device never registered the token.
    case unknownToken(String)
    /// The device connected again (to this node or another) since this uplink's claim.
    case superseded
    /// The device holds the most tokens it may, all active.
    case tooManyTokens(Int)

    public var code: String {
        switch self {
        case .tokenTaken: "tokenTaken"
        case .topicMismatch: "topicMismatch"
        case .malformedToken: "malformedToken"
        case .malformedTopic: "malformedTopic"
        case .unknownToken: "unknownToken"
        case .superseded: "superseded"
        case .tooManyTokens: "tooManyTokens"
        }
    }

    public var description: String {
        switch self {
        case .tokenTaken(let token): "the token \(token.prefix(8))… belongs to another device"
        case .topicMismatch(let token): "the token \(token.prefix(8))… was registered for another topic"
        case .malformedToken: "a device token is 64 hexadecimal digits"
        case .malformedTopic(let topic): "'\(topic)' is not a topic (an app id, reverse-DNS)"
        case .unknownToken(let token): "this device never registered the token \(token.prefix(8))…"
        case .superseded: "the device has a newer uplink; this one ends"
        case .tooManyTokens(let limit):
            "the device holds \(limit) active tokens, the most a device may; revoke some first"
        }
    }
}

/// The device a token is bound to, for the provider side.
public struct RelayTokenOwner: PushTokenOwner {
    public var device: String
    public var topic: String
    public var revokedAt: Date?
    /// Floods are held back per device, whichever of its tokens they are sent to.
    public var floodScope: String? { "device:" + device }
}

extension SQLiteRelayStore {
    /// Enrolls a new device: its id and secret (only the secret's hash is kept).
    public func enroll(now: Date) async throws -> (device: String, secret: String) {
        let device = Self.randomHex(16)
        let secret = Self.randomHex(32)
        let hash = Self.hash(secret)
        try await database.write { db in
            try db.execute(
                sql: "INSERT INTO device(id, secretHash, enrolledAt, lastSeenAt) VALUES (?, ?, ?, ?)",
                arguments: [device, hash, now, now])
        }
        return (device, secret)
    }

    /// Whether `secret` is the device's (compared by hash, in constant time).
    public func authenticate(device: String, secret: String) async throws -> Bool {
        guard let stored = try await database.read({ db in
            try String.fetchOne(db, sql: "SELECT secretHash FROM device WHERE id = ?", arguments: [device])
        }) else { return false }
        return Self.sameHash(Self.hash(secret), stored)
    }

    /// Compares two hashes in constant time.
    static func sameHash(_ given: String, _ expected: String) -> Bool {
        let (given, expected) = (Array(given.utf8), Array(expected.utf8))
        guard given.count == expected.count else { return false }
        return zip(given, expected).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// Binds `token` to `device` for `topic`; registering it again is a no-op.
    public func register(token: String, topic: String, device: String, now: Date) async throws {
        let token = token.lowercased()
        guard Self.isToken(token) else { throw RelayRefusal.malformedToken(token) }
        guard AppID(rawValue: topic) != nil else { throw RelayRefusal.malformedTopic(topic) }
        let version = try await database.write { db -> Int? in
            if let row = try Row.fetchOne(
                db, sql: "SELECT deviceId, topic FROM deviceToken WHERE token = ?", arguments: [token])
            {
                guard row["deviceId"] as String == device else { throw RelayRefusal.tokenTaken(token) }
                guard row["topic"] as String == topic else { throw RelayRefusal.topicMismatch(token) }
                return nil
            }
            let held = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM deviceToken WHERE deviceId = ?", arguments: [device]) ?? 0
            if held >= tokensPerDevice {
                try db.execute(
                    sql: """
                        DELETE FROM deviceToken WHERE token IN (
                            SELECT token FROM deviceToken WHERE deviceId = ? AND revokedAt IS NOT NULL
                            ORDER BY revokedAt, registeredAt LIMIT ?)
                        """,
                    arguments: [device, held - tokensPerDevice + 1])
                guard held - db.changesCount < tokensPerDevice else { throw RelayRefusal.tooManyTokens(tokensPerDevice) }
            }
            try db.execute(
                sql: "INSERT INTO deviceToken(token, deviceId, topic, registeredAt) VALUES (?, ?, ?, ?)",
                arguments: [token, device, topic, now])
            try Self.bumpCredentials(db)
            return try Int.fetchOne(db, sql: "SELECT version FROM credentials")
        }
        if let version { credentials.advance(to: version) }
    }

    /// Revokes the device's token at `at`: pushes to it answer 410 with that time, and its
    /// pushes still pending end as `revoked`. Revoking it again keeps the first time; revoking a
    /// token nobody registered does nothing (bgd names every revoked token on connecting, also
    /// one revoked before the relay ever heard of it).
    public func revoke(token: String, device: String, at: Date) async throws {
        let token = token.lowercased()
        // As a registration's: a token with NUL in it ended the device's session on PostgreSQL.
        guard SQLiteRelayStore.isToken(token) else { throw RelayRefusal.malformedToken(token) }
        let version = try await database.write { db -> Int? in
            let owner = try String.fetchOne(db, sql: "SELECT deviceId FROM deviceToken WHERE token = ?", arguments: [token])
            guard let owner else { return nil }
            guard owner == device else { throw RelayRefusal.unknownToken(token) }
            try db.execute(
                sql: "UPDATE deviceToken SET revokedAt = ? WHERE token = ? AND revokedAt IS NULL", arguments: [at, token])
            try db.execute(
                sql: "UPDATE push SET state = 'revoked', endedAt = ? WHERE token = ? AND state = 'pending'",
                arguments: [at, token])
            try Self.bumpCredentials(db)
            return try Int.fetchOne(db, sql: "SELECT version FROM credentials") ?? 0
        }
        if let version { credentials.advance(to: version) }
    }

    public func tokenOwner(_ token: String) async throws -> RelayTokenOwner? {
        try await database.read { db in
            try Row.fetchOne(
                db, sql: "SELECT deviceId, topic, revokedAt FROM deviceToken WHERE token = ?",
                arguments: [token.lowercased()]
            ).map { RelayTokenOwner(device: $0["deviceId"], topic: $0["topic"], revokedAt: try $0.decode(forColumn: "revokedAt")) }
        }
    }

    /// The devices enrolled.
    public func deviceCount() async throws -> Int {
        try await database.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM device") ?? 0 }
    }

    static func isToken(_ token: String) -> Bool {
        token.utf8.count == 64 && token.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    static func hash(_ secret: String) -> String {
        SHA256.hash(data: Data(secret.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    static func randomHex(_ bytes: Int) -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &generator)) }
            .joined()
    }
}
