import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Crypto
import Foundation

/// What the gateway does with one provider request: authenticate the provider token, validate
/// the request, resolve the device token, check the topic, and queue the push durably — in the
/// order APNs does, answering with APNs' reasons.
actor PushIntake {
    struct Answer: Sendable {
        var status: Int
        var reason: APNsReason?
        /// For 410: when the token stopped being valid (milliseconds since 1970).
        var timestamp: Int64?
        var apnsID: String
    }

    private let store: BackgroundStore
    private let clock: any WallClock
    private var tokenClock = ProviderTokenClock()
    /// Signatures already verified, so a provider reusing its token (as it should) costs one
    /// ES256 verification per token, not per push.
    private var verified: Set<String> = []

    private let queued: Doorbell
    private let writer: PushQueueWriter

    init(store: BackgroundStore, clock: any WallClock, queued: Doorbell) {
        self.store = store
        self.clock = clock
        self.queued = queued
        writer = PushQueueWriter(store: store, clock: clock)
    }

    func handle(method: String, path: String, headers: [(name: String, value: String)], body: Data, bodySize: Int) async -> Answer {
        let apnsID = headers.first { $0.name.lowercased() == "apns-id" }?.value.lowercased() ?? UUID().uuidString.lowercased()
        func refuse(_ reason: APNsReason, timestamp: Int64? = nil) -> Answer {
            Answer(status: reason.status, reason: reason, timestamp: timestamp, apnsID: apnsID)
        }
        guard method == "POST" else { return refuse(.methodNotAllowed) }
        guard path.hasPrefix("/3/device/") else { return refuse(.badPath) }
        let now = clock.now

        // The provider first: nothing about the request is answered to someone unauthenticated.
        let authorization = headers.first { $0.name.lowercased() == "authorization" }?.value
        let token: ProviderToken
        switch ProviderToken.parse(authorization: authorization) {
        case .failure(let reason): return refuse(reason)
        case .success(let parsed): token = parsed
        }
        let key: ProviderKeyRegistration
        do {
            guard let found = try await store.providerKey(token.keyID) else { return refuse(.invalidProviderToken) }
            key = found
        } catch {
            return refuse(.serviceUnavailable)
        }
        guard key.teamID == token.teamID else { return refuse(.invalidProviderToken) }
        guard verify(token, with: key) else { return refuse(.invalidProviderToken) }
        if case .failure(let reason) = tokenClock.admit(token, now: now) { return refuse(reason) }

        let push: ValidatedPush
        switch PushRequestValidator.validate(method: method, path: path, headers: headers, body: body, bodySize: bodySize) {
        case .failure(let reason): return refuse(reason)
        case .success(let valid): push = valid
        }
        guard key.topics.contains(push.topic) else { return refuse(.topicDisallowed) }
        do {
            guard let owner = try await store.deviceTokenOwner(push.deviceToken) else { return refuse(.badDeviceToken) }
            guard owner.app.rawValue == push.topic else { return refuse(.deviceTokenNotForTopic) }
            if let revoked = owner.revokedAt { return refuse(.unregistered, timestamp: Int64(revoked.timeIntervalSince1970 * 1000)) }
            try await writer.enqueue(
                NewPush(
                    app: owner.app, apnsID: push.apnsID ?? apnsID, pushType: push.pushType.rawValue, priority: push.priority,
                    collapseID: push.collapseID, expiration: push.expiration, payload: push.payload))
        } catch {
            return refuse(.serviceUnavailable)
        }
        queued.ring()
        return Answer(status: 200, reason: nil, timestamp: nil, apnsID: push.apnsID ?? apnsID)
    }

    /// ES256 over `header.claims` with the key's public half.
    private func verify(_ token: ProviderToken, with key: ProviderKeyRegistration) -> Bool {
        let cacheKey = token.keyID + "." + token.signingInput + "." + token.signature.base64EncodedString()
        if verified.contains(cacheKey) { return true }
        guard let publicKey = try? P256.Signing.PublicKey(pemRepresentation: key.publicKeyPEM),
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: token.signature),
            publicKey.isValidSignature(signature, for: Data(token.signingInput.utf8))
        else { return false }
        if verified.count > 10_000 { verified.removeAll() }
        verified.insert(cacheKey)
        return true
    }
}
