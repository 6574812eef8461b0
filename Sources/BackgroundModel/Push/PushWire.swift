import Foundation

/// An app's device token (`registerForRemoteNotifications`): 32 random bytes as 64 hex digits,
/// stable across restarts of bgd and of the app until revoked.
public struct DeviceTokenInfo: Hashable, Codable, Sendable {
    public var app: AppID
    public var token: String
    public var createdAt: Date

    public init(app: AppID, token: String, createdAt: Date) {
        self.app = app
        self.token = token
        self.createdAt = createdAt
    }
}

/// A provider key registered with bgd (`bgctl push keys add`): only the public half is sent and
/// kept; the .p8 private key stays with the provider.
public struct ProviderKeyRegistration: Hashable, Codable, Sendable {
    /// The 10-character Key ID APNs shows for the key (the JWT's `kid`).
    public var keyID: String
    /// The 10-character Team ID (the JWT's `iss`).
    public var teamID: String
    /// The topics (app ids) this key may push to.
    public var topics: [String]
    /// The P-256 public key, PEM ("-----BEGIN PUBLIC KEY-----").
    public var publicKeyPEM: String
    public var addedAt: Date?

    public init(keyID: String, teamID: String, topics: [String], publicKeyPEM: String, addedAt: Date? = nil) {
        self.keyID = keyID
        self.teamID = teamID
        self.topics = topics
        self.publicKeyPEM = publicKeyPEM
        self.addedAt = addedAt
    }

    /// Why bgd cannot take this key, or nil (the PEM itself is checked by bgd).
    /// Whether `text` is a Key ID or Team ID as APNs gives them: 10 characters, A-Z and 0-9.
    public static func isID(_ text: String) -> Bool {
        text.count == 10 && text.allSatisfy { $0.isASCII && ($0.isUppercase || $0.isNumber) }
    }

    public var problem: String? {
        let isID = Self.isID
        if !isID(keyID) { return "'keyID' is the 10-character Key ID (A-Z, 0-9) APNs shows for the key" }
        if !isID(teamID) { return "'teamID' is the 10-character Team ID (A-Z, 0-9)" }
        if topics.isEmpty || topics.count > 100 || topics.contains(where: { AppID(rawValue: $0) == nil }) {
            return "'topics' lists 1 to 100 app ids (reverse-DNS) the key may push to"
        }
        if publicKeyPEM.utf8.count > 4096 { return "'publicKeyPEM' is too long for a P-256 public key" }
        return nil
    }
}

/// Where a push the gateway accepted stands.
public enum PushState: String, Codable, Sendable, CaseIterable {
    /// Waits to wake its app (background pushes).
    case queued
    /// Its run is in flight: delivered once the app's handler answers, queued again if the run is cut short.
    case delivering
    /// The app's handler answered.
    case delivered
    /// A newer push for the same app (and collapse id) took its place.
    case replaced
    /// It will not be delivered (expired, or its runs failed too often); the reason says which.
    case dropped
    /// An alert push: kept, wakes nothing.
    case recorded
}

/// A push the gateway accepted, and what became of it (`GET /v1/apps/{id}/pushes`).
public struct PushRecord: Hashable, Codable, Sendable {
    public var id: PushID
    public var apnsID: String
    public var pushType: String
    public var priority: Int
    public var collapseID: String?
    public var expiration: Date?
    public var receivedAt: Date
    public var state: PushState
    /// Why it is in that state (nil for a push not yet looked at, and for alert pushes).
    public var reasonCode: ReasonCode?
    public var reason: String?
    public var payload: String
    /// How many runs it has gone to: each spends a wake, and a run that crashes or is cut short
    /// sends it again, up to three times.
    public var attempts: Int

    public init(
        id: PushID, apnsID: String, pushType: String, priority: Int, collapseID: String?, expiration: Date?,
        receivedAt: Date,
        state: PushState, reasonCode: ReasonCode? = nil, reason: String?, payload: String, attempts: Int = 0
    ) {
        self.reasonCode = reasonCode
        self.attempts = attempts
        self.id = id
        self.apnsID = apnsID
        self.pushType = pushType
        self.priority = priority
        self.collapseID = collapseID
        self.expiration = expiration
        self.receivedAt = receivedAt
        self.state = state
        self.reason = reason
        self.payload = payload
    }

    /// "1 try", "3 tries"; nil for a push no run has been sent yet.
    public var triesDescription: String? {
        attempts == 0 ? nil : "\(attempts) \(attempts == 1 ? "try" : "tries")"
    }
}
