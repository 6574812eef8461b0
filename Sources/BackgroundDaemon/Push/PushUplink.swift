import AsyncHTTPClient
import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle

/// bgd's connection out to a push relay, for a machine no provider can reach (behind NAT): one
/// long-lived connection, newline-delimited JSON both ways (see `UplinkFrame`), opened by bgd —
/// the lines straight on TLS (ALPN `bgrelay-uplink/1`), where an idle device costs the relay a
/// third of what an HTTP/2 stream does; or, with a relay that does not name that protocol back
/// (or over `http://`), an HTTP/2 stream (`POST /v1/uplink`) through AsyncHTTPClient.
///
/// On connecting it names every device token its apps were given (and those revoked), and again
/// whenever one is made or revoked. Each push that comes down is committed to bgd's own queue
/// before it is acknowledged; the relay marks it delivered only on that acknowledgement, and
/// sends it again on the next connection otherwise — the store drops the repeat by its apns-id,
/// so a push reaches its app once.
///
/// Idle, it costs two wakeups every `keepAlive`: an empty line up, and a look, `answerWithin`
/// later, that something came back (the relay echoes it) — a connection a NAT dropped silently
/// is found within minutes, not at TCP's retransmission timeout. It reconnects after a failure
/// with jittered, doubling backoff (1 s to 5 min) — and at once when the network comes back or
/// changes, as a phone's push connection does: an outage of minutes would otherwise leave the
/// device deaf for up to the backoff after it ends. A change while connected sends a keep-alive
/// at once (the path the connection took may be gone).
public actor PushUplink: Service {
    public struct Configuration: Sendable {
        /// The relay to enroll with at start if bgd has no credential for it (`--push-relay`).
        public var url: String?
        /// A CA certificate (PEM file) to trust for it (`--push-relay-ca`).
        public var certificate: String?
        /// What the relay asks of a device to enroll, if it asks (`--push-relay-enrollment-token`).
        public var enrollmentToken: String?
        public var keepAlive: Duration
        public var answerWithin: Duration
        public var maximumBackoff: Duration
        /// How long a connection may take to be an uplink: TLS up and the lines agreed, or the
        /// HTTP/2 stream's response head. A relay that accepts and never answers (a stopped
        /// node, a proxy whose upstream hangs) is then a failed attempt, not a hang for good.
        public var connectWithin: Duration

        public init(
            url: String? = nil, certificate: String? = nil, enrollmentToken: String? = nil,
            keepAlive: Duration = .seconds(270), answerWithin: Duration = .seconds(30),
            maximumBackoff: Duration = .seconds(300), connectWithin: Duration = .seconds(30)
        ) {
            self.connectWithin = connectWithin
            self.url = url
            self.enrollmentToken = enrollmentToken
            self.certificate = certificate
            self.keepAlive = keepAlive
            self.answerWithin = answerWithin
            self.maximumBackoff = maximumBackoff
        }
    }

    public enum Failure: Error, CustomStringConvertible {
        case refused(status: Int, body: String)
        /// Enrolled already, and not asked to replace it.
        case alreadyEnrolled(url: String, device: String)
        case closed
        case silent(Duration)
        case badURL(String)
        case closedByRelay(code: String, reason: String)
        /// bgd was enrolled anew (another relay, or as another device) while this uplink ran.
        case credentialChanged

        public var description: String {
            switch self {
            case .refused(let status, let body): "the relay answered \(status): \(body)"
            case .alreadyEnrolled(let url, let device): "enrolled with \(url) as device \(device) already"
            case .closed: "the relay closed the uplink"
            case .silent(let wait): "no answer from the relay within \(wait) of a keep-alive"
            case .badURL(let url): "'\(url)' is not a relay URL (https://host:port)"
            case .closedByRelay(let code, let reason): "the relay ended the uplink (\(code)): \(reason)"
            case .credentialChanged: "enrolled anew; the uplink moves to the new credential"
            }
        }
    }

    private let configuration: Configuration
    /// When bgd last enrolled again because the relay no longer knew the device.
    /// On `elapsed`: a wall clock set back would hold the next enrollment off until it caught up.
    private var lastEnrolledAgain: Duration?
    private let store: BackgroundStore
    private let credentialPath: String
    private let clock: any WallClock
    private let pushes: Doorbell
    /// Rung when a device token is made or revoked, or a new credential is saved.
    private let changed = Doorbell()
    /// Rung by the conditions monitor when the network comes, goes or changes kind.
    private let network: Doorbell
    /// Makes the keep-alive go now (the network changed under a connected uplink).
    private let probe = Doorbell()
    /// The network changed while the uplink was down: the next attempt starts the backoff over.
    private var networkChangedWhileDown = false
    private let logger: Logger
    /// Told how many pushes each read from the relay stored.
    private let stored: @Sendable (Int) -> Void
    private var status = PushRelayStatus(state: .off)
    /// When the relay last sent anything, as time passed (`WallClock.elapsed`): the liveness
    /// check must not take a clock set back for silence.
    private var lastReceived = Duration.zero
    /// The connection's transport (`PushRelayStatus.transport`), shown once it is up.
    private var transport: String?

    init(
        configuration: Configuration, store: BackgroundStore, stateDirectory: String, clock: any WallClock,
        pushes: Doorbell, network: Doorbell = Doorbell(), stored: @escaping @Sendable (Int) -> Void = { _ in },
        logger: Logger
    ) {
        self.stored = stored
        self.configuration = configuration
        self.network = network
        self.store = store
        credentialPath = stateDirectory + "/push-relay.json"
        self.clock = clock
        self.pushes = pushes
        self.logger = logger
        store.pushCredentials.observe { [changed] in changed.ring() }
    }

    public func currentStatus() -> PushRelayStatus { status }

    /// The relay's CA to trust: bgd's `--push-relay-ca` when it is for the relay enrolled with
    /// (a path corrected there must not lose to the one saved at enrollment), else the one saved
    /// with the credential (a relay enrolled with since, `bgctl push relay enroll --replace`).
    private func trustedCertificate(_ credential: RelayEnrollment) -> String? {
        if let certificate = configuration.certificate, let url = configuration.url,
            Self.nodes(url).joined(separator: ",") == credential.url
        {
            return certificate
        }
        return credential.certificate
    }

    /// Enrolls with the relay at `url` (its uplink, `https://host:2198`; several nodes of one
    /// relay comma-separated, tried in turn) and keeps the credential 0600 in the state
    /// directory; the uplink connects with it at once. `enrollmentToken` is for a relay that
    /// enrolls only devices that present one; it is not kept.
    public func enroll(
        url: String, certificate: String?, enrollmentToken: String? = nil, replace: Bool = true
    ) async throws -> PushRelayStatus {
        let nodes = Self.nodes(url)
        guard !nodes.isEmpty else { throw Failure.badURL(url) }
        // A URL that could never be enrolled with is said so first, enrolled or not.
        for node in nodes where ServerURL.problem(with: node) != nil { throw Failure.badURL(node) }
        // Checked here, in the actor, not by the caller before it: two enrollments at once
        // must not both pass.
        if !replace, let current = load() { throw Failure.alreadyEnrolled(url: current.url, device: current.device) }
        let client = Self.client(trusting: certificate)
        defer { _ = client.shutdown() }
        var enrolled: RelayEnrollment?
        var lastError: (any Error)?
        for node in nodes where enrolled == nil {
            do {
                var request = HTTPClientRequest(url: node + "/v1/devices")
                request.method = .POST
                if let enrollmentToken {
                    request.headers.add(name: "authorization", value: "Bearer \(enrollmentToken)")
                }
                let response = try await client.execute(request, timeout: .seconds(30))
                let body = try await response.body.collect(upTo: 64 * 1024)
                guard response.status == .ok,
                    let enrollment = try? JSONDecoder().decode(RelayEnrollment.self, from: body)
                else {
                    throw Failure.refused(status: Int(response.status.code), body: String(buffer: body))
                }
                enrolled = enrollment
            } catch {
                lastError = error
            }
        }
        guard var enrollment = enrolled else { throw lastError ?? Failure.badURL(url) }
        // Again: the actor took other calls while the relay answered, and another enrollment may
        // have been saved meanwhile (the relay forgets the device made here once it goes unseen).
        if !replace, let current = load() { throw Failure.alreadyEnrolled(url: current.url, device: current.device) }
        enrollment.url = nodes.joined(separator: ",")
        // Absolute: bgd may next start from another directory (systemd starts it from /).
        enrollment.certificate = certificate.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
        try save(enrollment)
        logger.notice("Enrolled with a push relay", metadata: ["relay": "\(url)", "device": "\(enrollment.device)"])
        status = PushRelayStatus(state: .connecting, url: nodes[0], device: enrollment.device, since: clock.now)
        changed.ring()
        return status
    }

    public func run() async throws {
        try? await cancelWhenGracefulShutdown {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await self.serve() }
                group.addTask { try await self.followNetwork() }
                try await group.next()
                group.cancelAll()
            }
        }
    }

    private func followNetwork() async throws {
        while true {
            try await network.wait(until: nil, on: clock)
            // Nothing to reach without a relay (none named, none enrolled with).
            guard configuration.url != nil || load() != nil else { continue }
            if status.state == .connected {
                logger.info("The network changed; checking the push relay uplink now")
                probe.ring()
            } else {
                logger.info("The network changed; connecting to the push relay now")
                networkChangedWhileDown = true
                changed.ring()
            }
        }
    }

    private func serve() async throws {
        if let url = configuration.url, load()?.url != Self.nodes(url).joined(separator: ",") {
            var backoff = Duration.seconds(1)
            while !Task.isCancelled {
                do {
                    _ = try await enroll(
                        url: url, certificate: configuration.certificate, enrollmentToken: configuration.enrollmentToken
                    )
                    break
                } catch where Task.isCancelled {
                    return  // bgd is stopping
                } catch {
                    logger.error(
                        "Cannot enroll with the push relay", metadata: ["relay": "\(url)", "error": "\(error)"])
                    status = PushRelayStatus(
                        state: .waiting, url: url, lastError: "\(error)", retryAt: clock.now.adding(backoff))
                    try await changed.wait(for: backoff, on: clock)  // time that passes, as below
                    backoff = networkChangedWhileDown ? .seconds(1) : min(backoff * 2, configuration.maximumBackoff)
                    networkChangedWhileDown = false
                }
            }
        }
        var backoff = Duration.seconds(1)
        var attempt = 0
        while !Task.isCancelled {
            guard let credential = load() else {
                try await changed.wait(until: nil, on: clock)
                continue
            }
            // Several nodes of one relay: the next one after each failure.
            let nodes = Self.nodes(credential.url)
            let node = nodes[attempt % max(1, nodes.count)]
            attempt += 1
            let started = clock.now
            let startedElapsed = clock.elapsed
            status = PushRelayStatus(
                state: .connecting, url: node, device: credential.device, since: started,
                received: status.received)
            do {
                try await connect(credential, to: node)
            } catch is CancellationError {
                return
            } catch where Task.isCancelled {
                return  // bgd is stopping: the connection ended with it, not lost
            } catch Failure.credentialChanged {
                logger.notice("Enrolled anew; moving the push relay uplink", metadata: ["relay": "\(node)"])
                attempt = 0
                backoff = .seconds(1)
                continue
            } catch {
                if Self.saysUnknownDevice(error), await enrollAgain(replacing: credential) {
                    attempt = 0
                    backoff = .seconds(1)
                    continue
                }
                // The backoff is for a relay that cannot be reached or will not take the device.
                // One that did (the uplink was up) and then lost it — a node stopped or killed,
                // the connection gone silent — is tried again at once, on the next node: a minute
                // of such flapping otherwise left the backoff at minutes, and the device deaf for
                // that long after it ended (the relay chaos test); so is a node that says it is
                // stopping. Not when the relay ended the uplink for another reason: a node that
                // cannot reach its database (all its devices coming straight back would only
                // hammer it), or another uplink of this device (two machines sharing one
                // credential would take it from each other every second).
                let refused =
                    if case Failure.closedByRelay(let code, _) = error, code != "stopping" { true } else { false }
                if clock.elapsed - startedElapsed > .seconds(60) || (status.state == .connected && !refused) {
                    backoff = .seconds(1)
                }
                // Jitter: a relay node that restarts is not met by all its devices at once.
                let wait = backoff * Double.random(in: 0.5...1)
                logger.warning(
                    "Push relay uplink lost; reconnecting",
                    metadata: ["relay": "\(node)", "error": "\(error)", "retry.in": "\(wait)"])
                status.state = .waiting
                status.lastError = "\(error)"
                status.retryAt = clock.now.adding(wait)
                try await changed.wait(for: wait, on: clock)  // time that passes, whatever the clock is set to
                backoff = networkChangedWhileDown ? .seconds(1) : min(backoff * 2, configuration.maximumBackoff)
                networkChangedWhileDown = false
            }
        }
    }

    /// Whether the relay refused the device's credential: it does not know the device (forgot it
    /// after months unseen, or its database was restored from before the device enrolled).
    static func saysUnknownDevice(_ error: any Error) -> Bool {
        switch error {
        case Failure.refused(status: 401, _): true
        case Failure.closedByRelay(code: "unauthorized", _): true
        default: false
        }
    }

    /// The relay bgd was told to use (`--push-relay`) refused `credential`: enrolls with it again,
    /// as at start — the connection that follows names every token anew, so providers' tokens
    /// reach the apps again. A device enrolled by hand (`bgctl push relay enroll`, perhaps with
    /// another relay) is left to its operator: the status says what the relay said. True when
    /// a new credential is saved.
    private func enrollAgain(replacing credential: RelayEnrollment) async -> Bool {
        guard let url = configuration.url, Self.nodes(url).joined(separator: ",") == credential.url,
            load() == credential
        else { return false }
        // At most once per longest backoff: a relay that enrolls a device and then refuses it
        // (nodes that do not share one database) must not get enrollments in a tight loop.
        if let last = lastEnrolledAgain, clock.elapsed - last < configuration.maximumBackoff {
            return false
        }
        lastEnrolledAgain = clock.elapsed
        logger.notice(
            "The push relay does not know this device (forgotten, or its database restored); enrolling again",
            metadata: ["relay": "\(url)", "device": "\(credential.device)"])
        do {
            _ = try await enroll(
                url: url, certificate: configuration.certificate, enrollmentToken: configuration.enrollmentToken)
            return true
        } catch {
            logger.error("Cannot enroll with the push relay again", metadata: ["relay": "\(url)", "error": "\(error)"])
            return false
        }
    }

    /// One uplink, until it fails: as lines on TLS if the relay speaks them, else over HTTP/2.
    private func connect(_ credential: RelayEnrollment, to node: String) async throws {
        guard let connection = try await connectLines(credential, to: node) else {
            transport = "http2"
            return try await connectHTTP2(credential, to: node)
        }
        transport = "lines"
        try await connection.executeThenClose { inbound, outbound in
            let (up, sink) = AsyncStream<ByteBuffer>.makeStream()
            defer { sink.finish() }
            // The credential first, as the relay reads it; the registrations follow it.
            try await outbound.write(ByteBuffer(string: credential.bearer + "\n"))
            sink.yield(try await registrations())
            try await converse(reading: inbound, answering: sink, for: credential) {
                for await buffer in up { try await outbound.write(buffer) }
                throw Failure.closed
            }
        }
    }

    /// A TLS connection to `node` on which the relay agreed to speak the uplink's lines; nil if
    /// it did not (it named h2 or nothing back, or the URL is `http://`). h2 is offered too: a
    /// TLS proxy in front of a relay may refuse a handshake that offers nothing it knows.
    private func connectLines(
        _ credential: RelayEnrollment, to node: String
    ) async throws
        -> NIOAsyncChannel<ByteBuffer, ByteBuffer>?
    {
        guard let url = URL(string: node), url.scheme == "https", let host = url.host else { return nil }
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.applicationProtocols = [UplinkFrame.alpn, "h2"]
        // An uplink bgd ends (enrolled anew, gone silent) is done with: waiting NIOSSL's default
        // 5 s for the relay's close_notify only delayed the next connection by that much.
        tls.shutdownTimeout = .seconds(1)
        if let certificate = trustedCertificate(credential) { tls.additionalTrustRoots = [.file(certificate)] }
        let context = try NIOSSLContext(configuration: tls)
        let (channel, negotiated) = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.seconds(10))
            .connect(host: host, port: url.port ?? 443) { channel in
                channel.eventLoop.makeCompletedFuture {
                    // An address is checked against the certificate's IP names; SNI takes names only.
                    let isAddress = (try? SocketAddress(ipAddress: host, port: 0)) != nil
                    try channel.pipeline.syncOperations.addHandler(
                        try NIOSSLClientHandler(context: context, serverHostname: isAddress ? nil : host))
                    let negotiation = NIOTypedApplicationProtocolNegotiationHandler<
                        NIOAsyncChannel<ByteBuffer, ByteBuffer>?
                    > { result, channel in
                        guard case .negotiated(UplinkFrame.alpn) = result else { return channel.close().map { nil } }
                        return channel.eventLoop.makeCompletedFuture {
                            try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                        }
                    }
                    try channel.pipeline.syncOperations.addHandler(negotiation)
                    return (channel, negotiation.protocolNegotiationResult)
                }
            }
        // The handshake is bounded: a relay that accepts and never answers (a stopped node) is a
        // failed attempt, and its connection is closed, not left open behind a hung uplink.
        do {
            return try await clock.within(configuration.connectWithin) { try await negotiated.get() }
        } catch {
            channel.close(promise: nil)
            throw error
        }
    }

    /// One uplink as an HTTP/2 stream, until it fails.
    private func connectHTTP2(_ credential: RelayEnrollment, to node: String) async throws {
        let client = Self.client(trusting: trustedCertificate(credential))
        defer { _ = client.shutdown() }
        let (up, sink) = AsyncStream<ByteBuffer>.makeStream()
        defer { sink.finish() }
        var request = HTTPClientRequest(url: node + "/v1/uplink")
        request.method = .POST
        request.headers.add(name: "authorization", value: credential.bearer)
        request.headers.add(name: "content-type", value: "application/x-ndjson")
        request.body = .stream(up, length: .unknown)
        sink.yield(try await registrations())
        // The head within `connectWithin` (the relay authenticates the device first, its store
        // call bounded to 10 s); the body is the uplink itself, for as long as it lives.
        let response = try await clock.within(configuration.connectWithin) { [request] in
            try await client.execute(request, deadline: .distantFuture)
        }
        guard response.status == .ok else {
            let body = try? await response.body.collect(upTo: 4096)
            throw Failure.refused(status: Int(response.status.code), body: body.map { String(buffer: $0) } ?? "")
        }
        try await converse(reading: response.body, answering: sink, for: credential)
    }

    /// Reads the relay's lines and answers them, sends registrations as they change and keeps the
    /// connection alive, until one of them (or `alongside`) fails.
    private func converse<Body: AsyncSequence & Sendable>(
        reading body: Body, answering sink: AsyncStream<ByteBuffer>.Continuation, for credential: RelayEnrollment,
        alongside: (@Sendable () async throws -> Void)? = nil
    ) async throws where Body.Element == ByteBuffer {
        lastReceived = clock.elapsed
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.read(body, answering: sink) }
            group.addTask {
                while true {
                    try await self.changed.wait(until: nil, on: self.clock)
                    // Enrolled anew meanwhile (`enroll --replace`): this connection speaks for a
                    // credential that is gone, and would tell the old relay the apps' tokens for
                    // as long as keep-alives held it up.
                    guard await self.load() == credential else { throw Failure.credentialChanged }
                    sink.yield(try await self.registrations())
                }
            }
            group.addTask { try await self.keepAlive(sink) }
            if let alongside { group.addTask { try await alongside() } }
            try await group.next()
            group.cancelAll()
        }
    }

    func read<Body: AsyncSequence & Sendable>(
        _ body: Body, answering sink: AsyncStream<ByteBuffer>.Continuation
    ) async throws where Body.Element == ByteBuffer {
        var lines = UplinkLines()
        for try await buffer in body {
            lastReceived = clock.elapsed
            let read: [[UInt8]]
            do { read = try lines.append(buffer.readableBytesView) } catch { throw Failure.closed }
            // The pushes of one read are committed together (in order, with whatever came
            // between them handled where it came): a burst costs one commit, not one per push.
            var pushes: [RelayedPush] = []
            for line in read where !line.isEmpty {  // an empty one is the echo of a keep-alive
                guard let frame = UplinkFrame.decode(line) else {
                    logger.warning(
                        "Unreadable line from the push relay",
                        metadata: ["line": "\(String(decoding: line.prefix(80), as: UTF8.self))"])
                    continue
                }
                if case .push(let push) = frame {
                    pushes.append(push)
                    continue
                }
                try await accept(pushes, answering: sink)
                pushes = []
                try await handle(frame, answering: sink)
            }
            try await accept(pushes, answering: sink)
        }
        throw Failure.closed
    }

    private func handle(_ frame: UplinkFrame, answering sink: AsyncStream<ByteBuffer>.Continuation) async throws {
        switch frame {
        case .ready(let device):
            networkChangedWhileDown = false  // this connection is what that change was for
            status.state = .connected
            status.transport = transport
            status.since = clock.now
            status.lastError = nil
            status.retryAt = nil
            logger.notice("Push relay uplink is up", metadata: ["relay": "\(status.url ?? "")", "device": "\(device)"])
        case .push(let push):
            try await accept([push], answering: sink)
        case .refused(let code, let reason):
            logger.warning("The push relay refused a frame", metadata: ["code": "\(code)", "reason": "\(reason)"])
            status.lastRefusal = "\(code): \(reason)"
        case .closing(let code, let reason):
            throw Failure.closedByRelay(code: code, reason: reason)
        case .register, .revoke, .ack:
            logger.warning("The push relay sent a device's frame; ignored")
        }
    }

    /// Commits relayed pushes to bgd's queue in one transaction (a repeat is dropped there by
    /// its apns-id), then acknowledges each: the relay marks a push delivered only once it is
    /// in bgd's store. One for a token its app no longer holds (revoked while the push was on its
    /// way) is committed as dropped, with why, as the gateway would have refused it; one for a
    /// token bgd never issued (or for another topic) has no app to be recorded under, and is only
    /// logged.
    private func accept(_ relayed: [RelayedPush], answering sink: AsyncStream<ByteBuffer>.Continuation) async throws {
        guard !relayed.isEmpty else { return }
        var queued: [NewPush] = []
        let owners = try await owners(of: relayed.map(\.token))
        for push in relayed {
            guard let owner = owners[push.token.lowercased()], owner.app.rawValue == push.topic else {
                logger.warning(
                    "Dropped a relayed push for a token bgd did not issue", metadata: ["apns-id": "\(push.apnsID)"])
                continue
            }
            if let refusal = PushRequestValidator.validateRelayed(
                token: push.token, topic: push.topic, apnsID: push.apnsID, pushType: push.pushType,
                priority: push.priority, collapseID: push.collapseID, payload: push.payload)
            {
                logger.warning(
                    "Dropped a relayed push bgd's own gateway would refuse (is the relay a release that checks less?)",
                    metadata: ["apns-id": "\(push.apnsID)", "reason": "\(refusal.rawValue)", "app.id": "\(owner.app)"])
                continue
            }
            let dropped = owner.revokedAt.map { revoked in
                DecisionReason(
                    .pushTokenRevoked,
                    "the device token was revoked at \(revoked.formatted(.iso8601)), before the push arrived through the relay"
                )
            }
            queued.append(
                NewPush(
                    app: owner.app, apnsID: push.apnsID, pushType: push.pushType, priority: push.priority,
                    collapseID: push.collapseID,
                    // As the relay says, within what the store can hold (a relay is a peer, not bgd).
                    expiration: push.expirationMilliseconds.map {
                        StorableDates.clamped(Date(timeIntervalSince1970: Double($0) / 1000))
                    },
                    payload: push.payload, dropped: dropped))
        }
        if !queued.isEmpty {
            try await store.enqueuePushes(queued, now: clock.now)
            stored(queued.count)
            if queued.contains(where: { $0.dropped == nil }) { pushes.ring() }
        }
        status.received += relayed.count
        var acknowledgements = ByteBuffer()
        for push in relayed { acknowledgements.writeImmutableBuffer(Self.line(.ack(seq: push.seq))) }
        sink.yield(acknowledgements)
    }

    /// Token owners read once and kept while the store's push credentials stay as they were (no
    /// token issued or revoked since), as the gateway keeps them (`PushIntake`): a relayed push
    /// then costs no read of the store. Unknown tokens are not kept. Keyed in lower case.
    private var knownOwners: [String: (app: AppID, revokedAt: Date?)] = [:]
    private var knownOwnersGeneration = -1

    private func owners(of tokens: [String]) async throws -> [String: (app: AppID, revokedAt: Date?)] {
        let generation = store.pushCredentials.current
        if generation != knownOwnersGeneration {
            knownOwners.removeAll()
            knownOwnersGeneration = generation
        }
        var owners: [String: (app: AppID, revokedAt: Date?)] = [:]
        var missing: Set<String> = []
        for token in tokens.map({ $0.lowercased() }) {
            if let owner = knownOwners[token] { owners[token] = owner } else { missing.insert(token) }
        }
        guard !missing.isEmpty else { return owners }
        let found = try await store.deviceTokenOwners(missing)
        owners.merge(found) { $1 }
        // Kept only if nothing moved while the store was read (an actor call may interleave).
        if generation == store.pushCredentials.current, generation == knownOwnersGeneration, knownOwners.count < 100_000
        {
            knownOwners.merge(found) { $1 }
        }
        return owners
    }

    private func keepAlive(_ sink: AsyncStream<ByteBuffer>.Continuation) async throws {
        while true {
            // On time that passes, not the wall clock's: a clock set back an hour would otherwise
            // leave a dead connection unnoticed for an hour more.
            try await probe.wait(for: configuration.keepAlive, on: clock)
            let sent = clock.elapsed
            sink.yield(ByteBuffer(string: "\n"))
            try await clock.sleep(for: configuration.answerWithin)
            if lastReceived < sent { throw Failure.silent(configuration.answerWithin) }
        }
    }

    /// Every token's frame: registered if active, revoked (with when) if not.
    private func registrations() async throws -> ByteBuffer {
        var buffer = ByteBuffer()
        for token in try await store.deviceTokens() {
            let frame: UplinkFrame =
                if let revoked = token.revokedAt {
                    .revoke(token: token.token, atMilliseconds: Int64(revoked.timeIntervalSince1970 * 1000))
                } else {
                    .register(token: token.token, topic: token.app.rawValue)
                }
            buffer.writeImmutableBuffer(Self.line(frame))
        }
        return buffer
    }

    private static func line(_ frame: UplinkFrame) -> ByteBuffer {
        var buffer = ByteBuffer(bytes: frame.encoded())
        buffer.writeInteger(UInt8(ascii: "\n"))
        return buffer
    }

    private func load() -> RelayEnrollment? {
        guard let data = FileManager.default.contents(atPath: credentialPath) else { return nil }
        return try? JSONDecoder().decode(RelayEnrollment.self, from: data)
    }

    private func save(_ enrollment: RelayEnrollment) throws {
        let data = try JSONEncoder().encode(enrollment)
        let temporary = credentialPath + ".new"
        guard FileManager.default.createFile(atPath: temporary, contents: data, attributes: [.posixPermissions: 0o600])
        else { throw CocoaError(.fileWriteUnknown) }
        // Whole or not at all: a crash leaves the old credential or the new one.
        guard rename(temporary, credentialPath) == 0 else { throw CocoaError(.fileWriteUnknown) }
    }

    /// The nodes in a relay URL: comma-separated, each without a trailing slash.
    static func nodes(_ url: String) -> [String] {
        url.split(separator: ",").map { part in
            let node = part.trimmingCharacters(in: .whitespaces)
            return node.hasSuffix("/") ? String(node.dropLast()) : node
        }.filter { !$0.isEmpty }
    }

    private static func client(trusting certificate: String?) -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.httpVersion = .automatic
        // A refused connection fails now: the uplink has its own backoff, and the pool's retries
        // would hold each attempt (and `bgctl push relay enroll`) for the connect timeout.
        configuration.connectionPool.retryConnectionEstablishment = false
        if let certificate {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.additionalTrustRoots = [.file(certificate)]
            configuration.tlsConfiguration = tls
        }
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }
}
