import BackgroundGateway
import BackgroundModel
import Foundation
import Logging

/// The relay's side of the APNs provider API: keys and tokens from its store, and a commit that
/// rings the sessions of the devices the pushes are for.
///
/// Each store call is bounded (`storeCallLimit`): one that does not end — seen once in a few dozen
/// PostgreSQL restarts, a transaction on a connection that never answered again — is answered
/// 503 like any database failure, and the pushes queued behind it go on to the next commit
/// instead of waiting with it for ever.
struct RelayDestinations: PushDestinations {
    let store: any RelayStore
    let hub: DeviceHub
    let clock: any WallClock
    let logger: Logger

    var credentialsGeneration: Int {
        let store = self.store
        return store.credentials.current(elapsed: clock.elapsed) {
            try? await store.credentialsVersion()
        }
    }

    func providerKey(_ keyID: String) async throws -> ProviderKeyRegistration? {
        try await bounded("reading a provider key") { [store] in try await store.providerKey(keyID) }
    }

    func owner(ofDeviceToken token: String) async throws -> RelayTokenOwner? {
        try await bounded("reading a device token") { [store] in try await store.tokenOwner(token) }
    }

    func commit(_ pushes: [AcceptedPush<RelayTokenOwner>], now: Date) async throws {
        let (hub, store) = (self.hub, self.store)
        let devices = try await bounded("committing \(pushes.count) pushes") {
            try await store.commit(pushes, now: now) { hub.isConnected($0) }
        }
        hub.ring(devices)
    }

    private func bounded<T: Sendable>(_ what: String, _ call: @escaping @Sendable () async throws -> T) async throws -> T {
        do {
            return try await clock.within(storeCallLimit, call)
        } catch let error as DeadlineExceeded {
            logger.error("The store did not answer; answering 503", metadata: ["call": "\(what)", "error": "\(error)"])
            throw error
        }
    }
}
