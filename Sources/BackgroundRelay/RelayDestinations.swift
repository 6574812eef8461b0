import BackgroundGateway
import BackgroundModel
import Foundation

/// The relay's side of the APNs provider API: keys and tokens from its store, and a commit that
/// rings the sessions of the devices the pushes are for.
struct RelayDestinations: PushDestinations {
    let store: any RelayStore
    let hub: DeviceHub
    let clock: any WallClock

    var credentialsGeneration: Int {
        let store = self.store
        return store.credentials.current(now: clock.now.timeIntervalSince1970) {
            try? await store.credentialsVersion()
        }
    }

    func providerKey(_ keyID: String) async throws -> ProviderKeyRegistration? { try await store.providerKey(keyID) }

    func owner(ofDeviceToken token: String) async throws -> RelayTokenOwner? { try await store.tokenOwner(token) }

    func commit(_ pushes: [AcceptedPush<RelayTokenOwner>], now: Date) async throws {
        let hub = self.hub
        let devices = try await store.commit(pushes, now: now) { hub.isConnected($0) }
        hub.ring(devices)
    }
}
