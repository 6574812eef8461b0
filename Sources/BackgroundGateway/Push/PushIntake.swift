import BackgroundModel
import BackgroundPolicy
import Crypto
import Foundation

/// What the gateway does with one provider request: authenticate the provider token, validate
/// the request, resolve the device token, check the topic, hold back a flood to one token, and
/// queue the push durably — in the order APNs does, answering with APNs' reasons.
///
/// Provider keys and device-token owners are read from the destinations once and kept, until
/// their `credentialsGeneration` moves (a key added or removed, a token revoked): a revocation
/// answers 410 from the next request on, and a push costs no read of the store.
public actor PushIntake<Destinations: PushDestinations> {
    public struct Answer: Sendable {
        public var status: Int
        public var reason: APNsReason?
        /// For 410: when the token stopped being valid (milliseconds since 1970).
        public var timestamp: Int64?
        public var apnsID: String
    }
    public typealias Owner = Destinations.Owner

    private let destinations: Destinations
    private let clock: any WallClock
    private var tokenClock = ProviderTokenClock()
    /// Signatures already verified, so a provider reusing its token (as it should) costs one
    /// ES256 verification per token, not per push.
    private var verified: Set<String> = []
    /// Authorization headers already parsed (parsing is pure; its answer never changes).
    private var parsedTokens: [String: ProviderToken] = [:]

    /// Told after each push is committed (bgd rings its dispatcher), and of every answer's status.
    private let committed: @Sendable () -> Void
    private let answered: @Sendable (Int) -> Void
    private let writer: PushQueueWriter<Destinations>
    private let floodLimit: PushFloodLimit
    /// Each device token's allowance under `floodLimit`; full ones are forgotten now and then.
    private var floodAllowances: [String: PushThrottle.Allowance] = [:]
    /// How many pushes one provider key may send (bgrelay's; nil: no limit but the tokens').
    private let providerLimit: PushFloodLimit?
    private var providerAllowances: [String: PushThrottle.Allowance] = [:]
    /// How many tokens that fail their signature one peer (an address) may send: each costs an
    /// ES256 verification in this one actor, which every push waits on, so a peer knowing a key
    /// id and its team (both in every token) could otherwise keep it busy with forged ones. Over
    /// it, the peer's tokens are refused unverified (429) until it slows down; a valid token
    /// spends nothing.
    /// (Computed: a generic type holds no static stored property.)
    package static var refusedTokenLimit: PushFloodLimit { PushFloodLimit(perSecond: 10, burst: 50) }
    private var refusedTokenAllowances: [String: PushThrottle.Allowance] = [:]

    private var keys: [String: ProviderKeyRegistration] = [:]
    /// Key ids the destinations do not know, and signatures that did not verify, at this
    /// generation: a peer sending a made-up `kid` or a forged signature costs a set lookup, not a
    /// store read or an ES256 verification, each time. A key added moves the generation.
    private var unknownKeys: Set<String> = []
    private var refusedSignatures: Set<String> = []
    private var owners: [String: Owner] = [:]
    /// The destinations' `credentialsGeneration` the two caches above were read at.
    private var cachedGeneration = -1

    public init(
        destinations: Destinations, clock: any WallClock, floodLimit: PushFloodLimit = PushFloodLimit(),
        providerLimit: PushFloodLimit? = nil,
        committed: @escaping @Sendable () -> Void = {}, answered: @escaping @Sendable (Int) -> Void = { _ in }
    ) {
        self.destinations = destinations
        self.clock = clock
        self.committed = committed
        self.answered = answered
        self.floodLimit = floodLimit
        self.providerLimit = providerLimit
        writer = PushQueueWriter(destinations: destinations, clock: clock)
    }

    /// How many ES256 verifications were made (tests: a signature is checked once).
    package private(set) var signatureChecks = 0

    /// Drops the cached keys and owners if the destinations' have changed since they were read.
    private func revalidateCaches() {
        let generation = destinations.credentialsGeneration
        guard generation != cachedGeneration else { return }
        keys.removeAll()
        owners.removeAll()
        verified.removeAll()  // a key replaced under the same kid must not pass on an old verification
        unknownKeys.removeAll()
        refusedSignatures.removeAll()
        // A key removed and added again (or replaced) is another key: its first token is no
        // update of the old one's (a 429 for up to 20 minutes before). What is lost is only the
        // refresh limit's memory, which the next tokens build again.
        tokenClock = ProviderTokenClock()
        cachedGeneration = generation
    }

    private func providerKey(_ keyID: String) async throws -> ProviderKeyRegistration? {
        revalidateCaches()
        if let key = keys[keyID] { return key }
        if unknownKeys.contains(keyID) { return nil }
        let generation = cachedGeneration
        let found = try await destinations.providerKey(keyID)
        // Unknown keys are remembered only for this generation: one added later moves it.
        if generation == destinations.credentialsGeneration {
            if let found, keys.count < 10_000 { keys[keyID] = found }
            if found == nil {
                if unknownKeys.count >= 10_000 { unknownKeys.removeAll() }
                unknownKeys.insert(keyID)
            }
        }
        return found
    }

    private func owner(of deviceToken: String) async throws -> Owner? {
        revalidateCaches()
        if let owner = owners[deviceToken] { return owner }
        let generation = cachedGeneration
        guard let owner = try await destinations.owner(ofDeviceToken: deviceToken) else { return nil }
        if generation == destinations.credentialsGeneration, owners.count < 100_000 { owners[deviceToken] = owner }
        return owner
    }

    /// Whether one more push to the token (`floodScope`) fits `floodLimit` and one more from
    /// the provider key fits `providerLimit` now; if both do, both are spent. A push either
    /// limit refuses spends neither: before, a provider over its own limit still spent the
    /// device's allowance, draining it for every other provider of that device.
    private func admit(floodScope: String, keyID: String, now: Date) -> Bool {
        let flood = floodLimit.admit(floodAllowances[floodScope], now: now)
        let provider = providerLimit.map { $0.admit(providerAllowances[keyID], now: now) }
        guard flood.admitted, provider?.admitted != false else { return false }
        floodAllowances[floodScope] = flood.allowance
        if let provider { providerAllowances[keyID] = provider.allowance }
        if floodAllowances.count > 50_000 {
            floodAllowances = floodAllowances.filter { !floodLimit.isFull($0.value, now: now) }
        }
        return true
    }

    /// Gives back what `admit` spent, for a push that was not taken after all (the commit failed).
    private func refund(floodScope: String, keyID: String) {
        floodAllowances[floodScope] = floodAllowances[floodScope].map { floodLimit.refund($0) }
        if let providerLimit { providerAllowances[keyID] = providerAllowances[keyID].map { providerLimit.refund($0) } }
    }

    /// A request whose method, path and provider token passed: its body is read and checked next.
    public struct Authenticated: Sendable {
        fileprivate var method: String
        fileprivate var path: String
        fileprivate var key: ProviderKeyRegistration
        fileprivate var apnsID: String
    }

    public enum Authentication: Sendable {
        case authenticated(Authenticated)
        case refused(Answer)
    }

    /// What needs no body: the method, the path and the provider's token, in APNs' order. The
    /// gateway asks it before it reads a byte of the body, so a peer without a valid token costs
    /// no buffer and no waiting stream (it could hold one open for ever, its body never ended).
    public func authenticate(
        method: String, path: String, headers: [(name: String, value: String)], peer: String = ""
    ) async -> Authentication {
        let authentication = await checkProvider(method: method, path: path, headers: headers, peer: peer)
        if case .refused(let answer) = authentication { answered(answer.status) }
        return authentication
    }

    /// The rest, once the body is read: the request itself, the device token, the topic, the
    /// flood limits, and the push queued durably.
    public func handle(
        _ provider: Authenticated, headers: [(name: String, value: String)], body: Data, bodySize: Int
    ) async -> Answer {
        let answer = await accept(provider, headers: headers, body: body, bodySize: bodySize)
        answered(answer.status)
        return answer
    }

    private func checkProvider(
        method: String, path: String, headers: [(name: String, value: String)], peer: String
    ) async -> Authentication {
        let apnsID =
            headers.first { $0.name.lowercased() == "apns-id" }?.value.lowercased() ?? UUID().uuidString.lowercased()
        func refuse(_ reason: APNsReason) -> Authentication {
            .refused(Answer(status: reason.status, reason: reason, timestamp: nil, apnsID: apnsID))
        }
        guard method == "POST" else { return refuse(.methodNotAllowed) }
        guard path.hasPrefix("/3/device/") else { return refuse(.badPath) }

        // The provider first: nothing about the request is answered to someone unauthenticated.
        let authorization = headers.first { $0.name.lowercased() == "authorization" }?.value
        let token: ProviderToken
        if let authorization, let parsed = parsedTokens[authorization] {
            token = parsed
        } else {
            switch ProviderToken.parse(authorization: authorization) {
            case .failure(let reason): return refuse(reason)
            case .success(let parsed):
                token = parsed
                // A provider sends the same token for up to an hour: parse it once.
                if parsedTokens.count > 1_000 { parsedTokens.removeAll() }
                if let authorization { parsedTokens[authorization] = parsed }
            }
        }
        let key: ProviderKeyRegistration
        do {
            guard let found = try await providerKey(token.keyID) else { return refuse(.invalidProviderToken) }
            key = found
        } catch {
            return refuse(.serviceUnavailable)
        }
        guard key.teamID == token.teamID else { return refuse(.invalidProviderToken) }
        switch verify(token, with: key, peer: peer) {
        case .valid: break
        case .forged: return refuse(.invalidProviderToken)
        case .tooManyForged: return refuse(.tooManyRequests)
        }
        if case .failure(let reason) = tokenClock.admit(token, now: clock.now) { return refuse(reason) }
        return .authenticated(Authenticated(method: method, path: path, key: key, apnsID: apnsID))
    }

    private func accept(
        _ provider: Authenticated, headers: [(name: String, value: String)], body: Data, bodySize: Int
    ) async -> Answer {
        let (method, path, key, apnsID) = (provider.method, provider.path, provider.key, provider.apnsID)
        func refuse(_ reason: APNsReason, timestamp: Int64? = nil) -> Answer {
            Answer(status: reason.status, reason: reason, timestamp: timestamp, apnsID: apnsID)
        }
        let now = clock.now

        let push: ValidatedPush
        switch PushRequestValidator.validate(
            method: method, path: path, headers: headers, body: body, bodySize: bodySize)
        {
        case .failure(let reason): return refuse(reason)
        case .success(let valid): push = valid
        }
        guard key.topics.contains(push.topic) else { return refuse(.topicDisallowed) }
        do {
            guard let owner = try await owner(of: push.deviceToken) else { return refuse(.badDeviceToken) }
            guard owner.topic == push.topic else { return refuse(.deviceTokenNotForTopic) }
            if let revoked = owner.revokedAt {
                return refuse(.unregistered, timestamp: Int64(revoked.timeIntervalSince1970 * 1000))
            }
            let floodScope = owner.floodScope ?? push.deviceToken
            guard admit(floodScope: floodScope, keyID: key.keyID, now: now) else { return refuse(.tooManyRequests) }
            do {
                try await writer.enqueue(
                    AcceptedPush(
                        owner: owner, deviceToken: push.deviceToken, apnsID: push.apnsID ?? apnsID,
                        pushType: push.pushType.rawValue, priority: push.priority,
                        collapseID: push.collapseID, expiration: push.expiration, payload: push.payload))
            } catch {
                refund(floodScope: floodScope, keyID: key.keyID)  // a 503 costs nothing either
                throw error
            }
        } catch {
            return refuse(.serviceUnavailable)
        }
        committed()
        Failpoint.pushAfterCommitBeforeAnswer.hit()
        return Answer(status: 200, reason: nil, timestamp: nil, apnsID: push.apnsID ?? apnsID)
    }

    private enum Verdict { case valid, forged, tooManyForged }

    /// ES256 over `header.claims` with the key's public half; a verification that fails is
    /// charged to `peer` (`refusedTokenLimit`), and one over its allowance is not made.
    private func verify(_ token: ProviderToken, with key: ProviderKeyRegistration, peer: String) -> Verdict {
        // The key itself, not only its id: a key replaced under the same kid while it was read
        // (the generation moved meanwhile) must not leave its verdict on the other key's tokens.
        let cacheKey =
            key.publicKeyPEM + "." + token.signingInput + "." + token.signature.base64EncodedString()
        if verified.contains(cacheKey) { return .valid }
        if refusedSignatures.contains(cacheKey) { return .forged }
        let now = clock.now
        let limit = Self.refusedTokenLimit
        let allowance = limit.admit(refusedTokenAllowances[peer], now: now)
        guard allowance.admitted else { return .tooManyForged }
        signatureChecks += 1
        guard let publicKey = try? P256.Signing.PublicKey(pemRepresentation: key.publicKeyPEM),
            let signature = try? P256.Signing.ECDSASignature(rawRepresentation: token.signature),
            publicKey.isValidSignature(signature, for: Data(token.signingInput.utf8))
        else {
            if refusedSignatures.count >= 10_000 { refusedSignatures.removeAll() }
            refusedSignatures.insert(cacheKey)
            if refusedTokenAllowances.count >= 10_000 {
                refusedTokenAllowances = refusedTokenAllowances.filter { !limit.isFull($0.value, now: now) }
            }
            refusedTokenAllowances[peer] = allowance.allowance
            return .forged
        }
        if verified.count > 10_000 { verified.removeAll() }
        verified.insert(cacheKey)
        return .valid
    }
}
