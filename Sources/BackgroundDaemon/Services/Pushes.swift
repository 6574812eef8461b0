import BackgroundModel
import BackgroundStore
import Crypto
import Foundation

/// Push settings and history: apps' device tokens, the providers' keys, the pushes each app was
/// sent. The gateway that takes pushes in is `PushGateway`; this is what the API shows and changes.
struct Pushes: Sendable {
    let store: BackgroundStore
    let apps: Apps
    let clock: any WallClock
    let uplink: PushUplink

    /// The app's device token, made on first asking (`registerForRemoteNotifications`).
    func deviceToken(for app: AppID) async throws -> DeviceTokenInfo {
        _ = try await apps.require(app)
        return try await store.deviceToken(for: app, makingWith: Self.makeToken, now: clock.now)
    }

    /// The app's device token, if it has one; the operator's view.
    func existingDeviceToken(of app: AppID) async throws -> DeviceTokenInfo {
        _ = try await apps.require(app)
        guard let token = try await store.activeDeviceToken(of: app) else { throw ServiceError.noDeviceToken(app) }
        return token
    }

    /// `unregisterForRemoteNotifications`: pushes to the token answer 410 from now.
    func revokeDeviceTokens(of app: AppID) async throws {
        try await store.revokeDeviceTokens(of: app, now: clock.now)
    }

    /// The app's pushes, newest first.
    func pushes(of app: AppID, limit: Int) async throws -> [PushRecord] {
        _ = try await apps.require(app)
        return try await store.pushes(of: app, limit: limit).map(PushRecord.init)
    }

    func providerKeys() async throws -> [ProviderKeyRegistration] { try await store.providerKeys() }

    /// Adds a provider's key (checked by the caller for shape); its PEM is stored as parsed.
    func addProviderKey(
        _ key: ProviderKeyRegistration, publicKey: P256.Signing.PublicKey
    ) async throws
        -> ProviderKeyRegistration?
    {
        var key = key
        key.publicKeyPEM = publicKey.pemRepresentation
        try await store.addProviderKey(key, now: clock.now)
        return try await store.providerKey(key.keyID)
    }

    func removeProviderKey(_ keyID: String) async throws {
        guard try await store.removeProviderKey(keyID) else { throw ServiceError.unknownProviderKey(keyID) }
    }

    /// 32 random bytes as 64 lowercase hex digits, the shape of an APNs device token.
    static func makeToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &generator)) }.joined()
    }
}

extension PushRecord {
    init(_ push: StoredPush) {
        self.init(
            id: push.id, apnsID: push.apnsID, pushType: push.pushType, priority: push.priority,
            collapseID: push.collapseID,
            expiration: push.expiration, receivedAt: push.receivedAt, state: push.state, reasonCode: push.reasonCode,
            reason: push.reason,
            payload: String(decoding: push.payload, as: UTF8.self), attempts: push.attempts)
    }
}
