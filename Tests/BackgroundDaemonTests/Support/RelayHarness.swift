import AsyncHTTPClient
import BackgroundGateway
import BackgroundModel
import BackgroundPolicy
import BackgroundRelay
import BackgroundTesting
import Crypto
import Foundation
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import NIOTLS
import ServiceLifecycle
import Synchronization

/// A relay node in this process — its real listeners on loopback (TLS, HTTP/2, ports chosen by
/// the kernel), its real SQLite file — for a test's duration.
struct RelayNode: Sendable {
    let relay: Relay
    let directory: String
    let providerPort: Int
    let uplinkPort: Int

    var uplinkURL: String { "https://localhost:\(uplinkPort)" }
    var providerURL: String { "https://localhost:\(providerPort)" }
    var certificatePath: String { relay.certificatePath }
    var store: any RelayStore { relay.store }

    /// Several nodes on one PostgreSQL database of their own (a connection pool each, as
    /// processes would have), sharing one certificate.
    static func withNodes<T: Sendable>(
        _ count: Int, listenerProbe: PostgresRelayStore.ListenerProbe = .init(),
        _ body: @Sendable ([RelayNode]) async throws -> T
    ) async throws -> T {
        let url = try await TestPostgres.makeDatabase()
        let directory = TemporaryDirectory.make()
        _ = try GatewayCertificate.loadOrCreate(in: directory, now: SystemClock().now)
        @Sendable func start(_ index: Int, _ started: [RelayNode]) async throws -> T {
            guard index < count else { return try await body(started) }
            let store = try PostgresRelayStore(url: url, logger: logger)
            let pool = Task { await store.runPool() }
            defer { pool.cancel() }
            try await store.prepare()
            return try await with(
                directory: directory, store: store, node: "node\(index)", listenerProbe: listenerProbe
            ) {
                node in
                try await start(index + 1, started + [node])
            }
        }
        return try await start(0, [])
    }

    static var logger: Logger {
        var logger = Logger(label: "bgrelay")
        logger.logLevel =
            ProcessInfo.processInfo.environment["BGD_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        return logger
    }

    static func with<T: Sendable>(
        directory: String? = nil, store: (any RelayStore)? = nil, node: String = "node",
        providerLimit: PushFloodLimit = PushFloodLimit(perSecond: 5_000, burst: 50_000),
        deviceLimit: PushFloodLimit = PushFloodLimit(), clock: any WallClock = SystemClock(),
        retention: Relay.Retention = Relay.Retention(), enrollment: EnrollmentPolicy = EnrollmentPolicy(),
        offersLines: Bool = true, uplinkSilence: Duration = .seconds(900), uplinkWriteLimit: Duration? = nil,
        listenerProbe: PostgresRelayStore.ListenerProbe = .init(), _ body: @Sendable (RelayNode) async throws -> T
    ) async throws -> T {
        let directory = directory ?? TemporaryDirectory.make()
        let logger = Self.logger
        var configuration = Relay.Configuration(
            provider: .init(port: 0, floodLimit: deviceLimit), uplink: .init(port: 0), stateDirectory: directory,
            node: node, providerLimit: providerLimit, retention: retention, enrollment: enrollment)
        configuration.offersLines = offersLines
        configuration.uplinkSilence = uplinkSilence
        configuration.uplinkWriteLimit = uplinkWriteLimit
        configuration.listenerProbe = listenerProbe
        let relay = Relay(
            configuration: configuration, store: try store ?? Relay.openStore(in: directory), clock: clock,
            logger: logger)
        let group = ServiceGroup(
            configuration: .init(services: try relay.makeServices(), gracefulShutdownSignals: [], logger: logger))
        let running = Task { try await group.run() }
        defer { running.cancel() }
        let node = RelayNode(
            relay: relay, directory: directory, providerPort: try await relay.providerPort.listening(),
            uplinkPort: try await relay.uplinkPort.listening())
        do {
            let value = try await body(node)
            await group.triggerGracefulShutdown()
            _ = await running.result
            return value
        } catch {
            await group.triggerGracefulShutdown()
            _ = await running.result
            throw error
        }
    }

    /// A client that trusts the node's self-signed certificate.
    func client() -> HTTPClient { Self.client(trusting: certificatePath) }

    /// A client that trusts `certificate` (a PEM file); one that does not retry a refused
    /// connection fails at once against a node that is down (fault tests).
    static func client(trusting certificate: String, retryingConnections: Bool = true) -> HTTPClient {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.additionalTrustRoots = [.file(certificate)]
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.httpVersion = .automatic
        configuration.connectionPool.retryConnectionEstablishment = retryingConnections
        return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
    }

    /// `GET /metrics`, each sample by its name and labels.
    func metrics(client: HTTPClient) async throws -> [String: Double] {
        let response = try await client.execute(HTTPClientRequest(url: uplinkURL + "/metrics"), timeout: .seconds(10))
        let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
        return Dictionary(
            text.split(separator: "\n").filter { !$0.hasPrefix("#") }.compactMap { line in
                let parts = line.split(separator: " ")
                return parts.count == 2 ? (String(parts[0]), Double(parts[1]) ?? .nan) : nil
            }, uniquingKeysWith: { $1 })
    }

    /// Registers a provider key for `topics`.
    func addProviderKey(_ key: P256.Signing.PrivateKey, topics: [String]) async throws {
        try await store.addProviderKey(
            ProviderKeyRegistration(
                keyID: PushGatewayTests.keyID, teamID: PushGatewayTests.teamID, topics: topics,
                publicKeyPEM: key.publicKey.pemRepresentation), now: SystemClock().now)
    }

    /// Waits (yielding, never sleeping) until `condition` holds; false if it never does.
    func eventually(_ condition: () async throws -> Bool) async rethrows -> Bool {
        try await eventuallyAsync(condition)
    }

    /// Moves `clock` (this node's) a second at a time, up to `limit`, until the node has cut an
    /// uplink whose device reads nothing (`bgrelay_uplinks_cut_stalled_total`): the seconds it
    /// took, or nil.
    func secondsUntilAStalledUplinkIsCut(
        moving clock: ManualClock, client: HTTPClient, limit: Int = 300
    ) async throws -> Int? {
        for seconds in 1...limit {
            clock.advance(by: .seconds(1))
            if try await metrics(client: client)["bgrelay_uplinks_cut_stalled_total"] == 1 { return seconds }
        }
        return nil
    }
}

/// A device as the relay sees it, speaking the uplink by hand: enroll, then one HTTP/2 stream
/// of newline-delimited frames each way.
final class RawUplink: RawDevice {
    let enrollment: RelayEnrollment
    private let sink: AsyncStream<ByteBuffer>.Continuation
    let lines: AsyncStream<String>
    let status: Int

    private init(
        enrollment: RelayEnrollment, sink: AsyncStream<ByteBuffer>.Continuation, lines: AsyncStream<String>,
        status: Int
    ) {
        self.enrollment = enrollment
        self.sink = sink
        self.lines = lines
        self.status = status
    }

    static func enroll(_ node: RelayNode, client: HTTPClient) async throws -> RelayEnrollment {
        var request = HTTPClientRequest(url: node.uplinkURL + "/v1/devices")
        request.method = .POST
        let response = try await client.execute(request, timeout: .seconds(10))
        let body = try await response.body.collect(upTo: 4096)
        return try JSONDecoder().decode(RelayEnrollment.self, from: body)
    }

    /// Opens the uplink with `authorization` (the enrollment's own by default).
    static func connect(
        _ node: RelayNode, client: HTTPClient, enrollment: RelayEnrollment, authorization: String? = nil
    ) async throws -> RawUplink {
        let (up, sink) = AsyncStream<ByteBuffer>.makeStream()
        var request = HTTPClientRequest(url: node.uplinkURL + "/v1/uplink")
        request.method = .POST
        request.headers.add(name: "authorization", value: authorization ?? enrollment.bearer)
        request.body = .stream(up, length: .unknown)
        let response = try await client.execute(request, deadline: .distantFuture)
        let (lines, linesSink) = AsyncStream<String>.makeStream()
        Task {
            var partial = ""
            do {
                for try await buffer in response.body {
                    partial += String(buffer: buffer)
                    while let end = partial.firstIndex(of: "\n") {
                        linesSink.yield(String(partial[..<end]))
                        partial = String(partial[partial.index(after: end)...])
                    }
                }
            } catch {}
            if !partial.isEmpty { linesSink.yield(partial) }  // an answer that is no stream: its body
            linesSink.finish()
        }
        return RawUplink(enrollment: enrollment, sink: sink, lines: lines, status: Int(response.status.code))
    }

    func sendLine(_ line: String) { sink.yield(ByteBuffer(string: line + "\n")) }

    func close() { sink.finish() }
}

/// A device's side of an uplink by hand, whatever carries it: lines out, the relay's lines in.
protocol RawDevice: Sendable {
    /// The lines the relay sent, without their newlines; finished when it ended the uplink.
    var lines: AsyncStream<String> { get }
    func sendLine(_ line: String)
}

extension RawDevice {
    func send(_ frame: UplinkFrame) { sendLine(String(decoding: frame.encoded(), as: UTF8.self)) }

    /// Takes the next frame as a push and acknowledges it; whether it was one, and `node` then
    /// records it (the only push it holds) delivered.
    func acknowledgesThePush(on node: RelayNode) async throws -> Bool {
        guard case .push(let push)? = await next() else { return false }
        send(.ack(seq: push.seq))
        return try await node.eventually { try await node.store.pushLog().map(\.state) == [.delivered] }
    }

    /// The next line the relay sent (nil once it ended the uplink).
    func nextLine() async -> String? {
        var iterator = lines.makeAsyncIterator()
        return await iterator.next()
    }

    /// The next frame (nil once the uplink ended or for a line that is none).
    func next() async -> UplinkFrame? {
        guard let line = await nextLine() else { return nil }
        return UplinkFrame.decode(Data(line.utf8))
    }
}

/// A device speaking the uplink as lines straight on TLS (ALPN `bgrelay-uplink/1`), as bgd does,
/// by hand: `first` is sent as it is (a credential line, or whatever the test wants to try).
final class RawLineUplink: RawDevice {
    private let channel: any Channel
    let lines: AsyncStream<String>

    private init(channel: any Channel, lines: AsyncStream<String>) {
        self.channel = channel
        self.lines = lines
    }

    /// `thenCloseOutput`: once the TLS handshake is done, the device sends `first` and closes its
    /// side (TLS close_notify, then the socket's write side) in one write, as one TCP segment,
    /// and still reads until the relay closes.
    static func connect(
        _ node: RelayNode, first: String, receiveBuffer: Int? = nil, thenCloseOutput: Bool = false
    ) async throws -> RawLineUplink {
        try await connect(
            port: node.uplinkPort, certificatePath: node.certificatePath, first: first, receiveBuffer: receiveBuffer,
            thenCloseOutput: thenCloseOutput)
    }

    /// `receiveBuffer`: the socket's (SO_RCVBUF), for a device that is to stop reading soon.
    static func connect(
        port: Int, certificatePath: String, first: String, receiveBuffer: Int? = nil, thenCloseOutput: Bool = false
    ) async throws -> RawLineUplink {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.additionalTrustRoots = [.file(certificatePath)]
        tls.applicationProtocols = [UplinkFrame.alpn]
        let context = try NIOSSLContext(configuration: tls)
        let (lines, sink) = AsyncStream<String>.makeStream()
        var bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        if let receiveBuffer {
            bootstrap = bootstrap.channelOption(.socketOption(.so_rcvbuf), value: .init(receiveBuffer))
        }
        let channel =
            try await bootstrap
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    // A handler of its own for each channel: a connection to "localhost" may try
                    // more than one address, each on a channel that runs this.
                    try channel.pipeline.syncOperations.addHandler(OutputCorker())
                    try channel.pipeline.syncOperations.addHandler(
                        try NIOSSLClientHandler(context: context, serverHostname: "localhost"))
                    try channel.pipeline.syncOperations.addHandler(HandshakeWatcher())
                    try channel.pipeline.syncOperations.addHandler(LineCollector(sink: sink))
                }
            }
            .connect(host: "localhost", port: port).get()
        if thenCloseOutput {
            let handshake = try await channel.pipeline.handler(type: HandshakeWatcher.self).get()
            try await handshake.done(on: channel.eventLoop).get()
            let corker = try await channel.pipeline.handler(type: OutputCorker.self).get()
            try await channel.eventLoop.submit { corker.corked = true }.get()
            channel.write(ByteBuffer(string: first), promise: nil)
            try await channel.close(mode: .output)
        } else {
            try await channel.writeAndFlush(ByteBuffer(string: first))
        }
        return RawLineUplink(channel: channel, lines: lines)
    }

    func sendLine(_ line: String) { channel.writeAndFlush(ByteBuffer(string: line + "\n"), promise: nil) }

    func close() { channel.close(promise: nil) }

    /// Reads nothing more: what the relay writes fills the socket's buffers, then waits.
    func stopReading() async throws { try await channel.setOption(.autoRead, value: false).get() }
}

/// Hands each line a connection reads to `sink`, and finishes it when the connection closes.
private final class LineCollector: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    private let sink: AsyncStream<String>.Continuation
    private let partial = Mutex("")

    init(sink: AsyncStream<String>.Continuation) { self.sink = sink }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let text = String(buffer: unwrapInboundIn(data))
        partial.withLock { partial in
            partial += text
            while let end = partial.firstIndex(of: "\n") {
                sink.yield(String(partial[..<end]))
                partial = String(partial[partial.index(after: end)...])
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        sink.finish()
        context.fireChannelInactive()
    }
}

/// Tells when the TLS handshake is done: its promise is made when the handler is added and
/// completed, one way or the other, by the time it is removed (a debug build traps on a promise
/// left unfulfilled). Its state is the event loop's alone.
private final class HandshakeWatcher: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    private var promise: EventLoopPromise<Void>?

    /// Done when the handshake is; failed if the connection ended first.
    func done(on eventLoop: any EventLoop) -> EventLoopFuture<Void> {
        eventLoop.flatSubmit { [self] in
            promise?.futureResult ?? eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
        }
    }

    func handlerAdded(context: ChannelHandlerContext) { promise = context.eventLoop.makePromise() }

    func handlerRemoved(context: ChannelHandlerContext) { promise?.fail(ChannelError.ioOnClosedChannel) }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .handshakeCompleted = event as? TLSUserEvent { promise?.succeed() }
        context.fireUserInboundEventTriggered(event)
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise?.fail(ChannelError.ioOnClosedChannel)
        context.fireChannelInactive()
    }
}

/// Beneath TLS: once corked, holds every write until the output is closed, then writes them
/// all at once before closing it — a device's last line and its close_notify in one segment.
/// Its state is the event loop's alone.
private final class OutputCorker: ChannelOutboundHandler, @unchecked Sendable {
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    var corked = false
    private var held = ByteBuffer()
    private var promises: [EventLoopPromise<Void>] = []

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard corked else { return context.write(data, promise: promise) }
        var buffer = unwrapOutboundIn(data)
        held.writeBuffer(&buffer)
        if let promise { promises.append(promise) }
    }

    func flush(context: ChannelHandlerContext) {
        if !corked { context.flush() }
    }

    /// The connection ended while corked: what was held never went.
    func handlerRemoved(context: ChannelHandlerContext) {
        for waiting in promises { waiting.fail(ChannelError.ioOnClosedChannel) }
        promises = []
    }

    func close(context: ChannelHandlerContext, mode: CloseMode, promise: EventLoopPromise<Void>?) {
        if corked {
            corked = false
            let written = context.eventLoop.makePromise(of: Void.self)
            for waiting in promises { written.futureResult.cascade(to: waiting) }
            promises = []
            context.writeAndFlush(wrapOutboundOut(held), promise: written)
            held = ByteBuffer()
        }
        context.close(mode: mode, promise: promise)
    }
}
