import AsyncHTTPClient
import BackgroundDaemon
import BackgroundGateway
import BackgroundModel
import BackgroundPolicy
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

    /// A key removed and added again (or replaced under its kid) starts its token clock afresh:
    /// before, the new key's first token, minted a minute after the old key's, was refused 429
    /// TooManyProviderTokenUpdates for up to 20 minutes.
    @Test func aKeyAddedAgainStartsItsTokenClockAfresh() async throws {
        let store = try BackgroundStore.inMemory()
        let clock = ManualClock()
        let intake = PushIntake(destinations: StorePushDestinations(store: store), clock: clock)
        func add(_ key: P256.Signing.PrivateKey) async throws {
            try await store.addProviderKey(
                ProviderKeyRegistration(
                    keyID: PushGatewayTests.keyID, teamID: PushGatewayTests.teamID, topics: [PushGatewayTests.app],
                    publicKeyPEM: key.publicKey.pemRepresentation), now: clock.now)
        }
        func authenticated(_ jwt: String) async -> Bool {
            let answer = await intake.authenticate(
                method: "POST", path: "/3/device/" + String(repeating: "ab", count: 32),
                headers: [("authorization", "bearer " + jwt)])
            if case .authenticated = answer { return true }
            return false
        }
        let old = P256.Signing.PrivateKey()
        try await add(old)
        let provider = PushGatewayTests.Provider(client: HTTPClient.shared, base: "", key: old, now: clock.now)
        #expect(await authenticated(try provider.jwt()))
        clock.advance(by: .seconds(60))
        let new = P256.Signing.PrivateKey()
        #expect(try await store.removeProviderKey(PushGatewayTests.keyID))
        try await add(new)
        #expect(await authenticated(try provider.jwt(iat: clock.now, key: new)))
    }

    /// Forged tokens (each with a new signature, so none is refused from memory) cost one peer
    /// an ES256 verification each only up to its allowance; then its tokens are refused
    /// unverified (429) until it slows down, while another peer's are still checked. Before, a
    /// peer knowing a key id and its team kept the one actor every push waits on verifying.
    @Test func aPeerSendingForgedTokensIsSlowedDown() async throws {
        let store = try BackgroundStore.inMemory()
        let clock = ManualClock()
        let intake = PushIntake(destinations: StorePushDestinations(store: store), clock: clock)
        let key = P256.Signing.PrivateKey()
        try await store.addProviderKey(
            ProviderKeyRegistration(
                keyID: PushGatewayTests.keyID, teamID: PushGatewayTests.teamID, topics: [PushGatewayTests.app],
                publicKeyPEM: key.publicKey.pemRepresentation), now: clock.now)
        let provider = PushGatewayTests.Provider(client: HTTPClient.shared, base: "", key: key, now: clock.now)
        func answer(_ jwt: String, from peer: String) async -> APNsReason? {
            switch await intake.authenticate(
                method: "POST", path: "/3/device/" + String(repeating: "ab", count: 32),
                headers: [("authorization", "bearer " + jwt)], peer: peer)
            {
            case .authenticated: nil
            case .refused(let refusal): refusal.reason
            }
        }
        let burst = Int(PushIntake<StorePushDestinations>.refusedTokenLimit.burst)
        for _ in 0..<burst {
            let forged = try provider.jwt(key: P256.Signing.PrivateKey())
            #expect(await answer(forged, from: "192.0.2.1") == .invalidProviderToken)
        }
        let checks = await intake.signatureChecks
        #expect(await answer(try provider.jwt(key: P256.Signing.PrivateKey()), from: "192.0.2.1") == .tooManyRequests)
        #expect(await intake.signatureChecks == checks, "refused unverified")
        #expect(
            await answer(try provider.jwt(key: P256.Signing.PrivateKey()), from: "192.0.2.2") == .invalidProviderToken)
        #expect(await answer(try provider.jwt(), from: "192.0.2.2") == nil, "a valid token from another peer")
        // Slowed down, it is heard again.
        clock.advance(by: .seconds(1))
        #expect(
            await answer(try provider.jwt(key: P256.Signing.PrivateKey()), from: "192.0.2.1") == .invalidProviderToken)
    }
}

extension PushIntake {
    /// Both steps at once, for a request whose body is at hand (as the gateway does them).
    func handle(
        method: String, path: String, headers: [(name: String, value: String)], body: Data, bodySize: Int
    ) async -> Answer {
        switch await authenticate(method: method, path: path, headers: headers) {
        case .refused(let answer): answer
        case .authenticated(let provider): await handle(provider, headers: headers, body: body, bodySize: bodySize)
        }
    }
}
