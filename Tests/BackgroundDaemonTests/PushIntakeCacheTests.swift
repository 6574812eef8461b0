import AsyncHTTPClient
import BackgroundDaemon
import BackgroundGateway
import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Crypto
import Foundation
import Synchronization
import Testing

/// A peer that sends made-up key ids or forged signatures costs a set lookup each time after the
/// first, not a store read (on the relay, a database round trip) or an ES256 verification; a key
/// added later counts at once. Before, every such request read the store or verified again.
struct PushIntakeCacheTests {
    /// bgd's own destinations on a real store, counting the key reads that reach it.
    final class CountingDestinations: PushDestinations {
        let base: StorePushDestinations
        let keyReads = Mutex(0)
        init(base: StorePushDestinations) { self.base = base }
        var credentialsGeneration: Int { base.credentialsGeneration }
        func providerKey(_ keyID: String) async throws -> ProviderKeyRegistration? {
            keyReads.withLock { $0 += 1 }
            return try await base.providerKey(keyID)
        }
        func owner(ofDeviceToken token: String) async throws -> StorePushDestinations.Owner? {
            try await base.owner(ofDeviceToken: token)
        }
        func commit(_ pushes: [AcceptedPush<StorePushDestinations.Owner>], now: Date) async throws {
            try await base.commit(pushes, now: now)
        }
    }

    @Test func madeUpKeysAndForgedSignaturesAreRefusedFromMemory() async throws {
        let store = try BackgroundStore.inMemory()
        let clock = ManualClock()
        let destinations = CountingDestinations(base: StorePushDestinations(store: store))
        let intake = PushIntake(destinations: destinations, clock: clock)
        let key = P256.Signing.PrivateKey()
        let provider = PushGatewayTests.Provider(client: HTTPClient.shared, base: "", key: key, now: clock.now)
        func send(_ jwt: String) async -> PushIntake<CountingDestinations>.Answer {
            await intake.handle(
                method: "POST", path: "/3/device/" + String(repeating: "ab", count: 32),
                headers: [("authorization", "bearer " + jwt), ("apns-topic", PushGatewayTests.app)],
                body: Data(#"{"aps":{"content-available":1}}"#.utf8), bodySize: 31)
        }
        let madeUp = try provider.jwt(kid: "NOSUCHKEY1")
        for _ in 0..<3 { #expect(await send(madeUp).reason == .invalidProviderToken) }
        #expect(destinations.keyReads.withLock { $0 } == 1)

        try await store.addProviderKey(
            ProviderKeyRegistration(
                keyID: "NOSUCHKEY1", teamID: PushGatewayTests.teamID, topics: [PushGatewayTests.app],
                publicKeyPEM: key.publicKey.pemRepresentation), now: clock.now)
        #expect(await send(madeUp).reason != .invalidProviderToken, "a key added counts at once")

        let checks = await intake.signatureChecks
        let forged = try provider.jwt(key: P256.Signing.PrivateKey(), kid: "NOSUCHKEY1")
        for _ in 0..<3 { #expect(await send(forged).reason == .invalidProviderToken) }
        #expect(await intake.signatureChecks == checks + 1, "verified once, then refused from memory")
    }
}
