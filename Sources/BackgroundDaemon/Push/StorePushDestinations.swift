import BackgroundGateway
import BackgroundModel
import BackgroundStore
import Foundation

/// bgd's gateway keeps the pushes it accepts in its own store: a device token names one of this
/// machine's apps, and a push is queued for it in one group commit.
public struct StorePushDestinations: PushDestinations {
    public struct Owner: PushTokenOwner {
        public var app: AppID
        public var revokedAt: Date?
        public var topic: String { app.rawValue }
    }

    let store: BackgroundStore
    /// Told how many pushes each commit stored.
    let stored: @Sendable (Int) -> Void

    public init(store: BackgroundStore, stored: @escaping @Sendable (Int) -> Void = { _ in }) {
        self.store = store
        self.stored = stored
    }

    public var credentialsGeneration: Int { store.pushCredentials.current }

    public func providerKey(_ keyID: String) async throws -> ProviderKeyRegistration? {
        try await store.providerKey(keyID)
    }

    public func owner(ofDeviceToken token: String) async throws -> Owner? {
        try await store.deviceTokenOwner(token).map { Owner(app: $0.app, revokedAt: $0.revokedAt) }
    }

    public func commit(_ pushes: [AcceptedPush<Owner>], now: Date) async throws {
        try await store.enqueuePushes(
            pushes.map {
                NewPush(
                    app: $0.owner.app, apnsID: $0.apnsID, pushType: $0.pushType, priority: $0.priority,
                    collapseID: $0.collapseID, expiration: $0.expiration, payload: $0.payload)
            }, now: now)
        stored(pushes.count)
    }
}
