import BackgroundGateway
import BackgroundModel
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle

/// The relay's device side: `POST /v1/devices` enrolls a device, `POST /v1/uplink` is a device's
/// long-lived stream (see `UplinkFrame`), `GET /metrics` is for Prometheus. Served over TLS with
/// HTTP/2, as the provider side is, on its own port — where a device that names
/// `bgrelay-uplink/1` in ALPN speaks the uplink's lines straight on TLS instead (`serveLines`,
/// what bgd does: a fifth of the memory per idle device).
struct UplinkServer: Service {
    let configuration: PushGatewayConfiguration
    let store: any RelayStore
    let hub: DeviceHub
    let metrics: RelayMetrics
    let certificateDirectory: String
    let clock: any WallClock
    let logger: Logger
    let boundPort: BoundPort
    let node: String
    let enrollment: EnrollmentGate
    let offersLines: Bool
    /// How long a write to a device may wait (`StallBoundWriter`): the relay's `--uplink-silence`.
    let writeLimit: Duration
    /// Every enrollment, uplink and round (`Relay.activity`).
    let activity: @Sendable () -> Void

    func run() async throws {
        // Thousands of devices idle here: their connections' buffers cost only what is written,
        // and their reads start small.
        let uplink = self
        let server: HTTPServerBuilder
        let gate: ConnectionGate
        do {
            (server, gate) = try PushGateway<RelayDestinations>.serverBuilder(
                configuration, certificateDirectory: certificateDirectory, now: clock.now,
                buffers: .idle,
                alternative: offersLines
                    ? ALPNAlternative(name: UplinkFrame.alpn, prepare: uplink.prepareLines) { connection, _ in
                        await uplink.serveLines(connection)
                    } : nil)
        } catch {
            boundPort.failedToPrepare(error)
            throw error
        }
        let router = Router(context: UplinkRequestContext.self)
        let (store, hub, clock, metrics, logger, enrollment, activity) = (
            self.store, self.hub, self.clock, self.metrics, self.logger, self.enrollment, self.activity
        )
        router.post("v1/devices") { request, _ in
            activity()
            if let refusal = enrollment.check(authorization: request.headers[.authorization], now: clock.now) {
                metrics.enrollmentRefused(refusal.code)
                logger.notice("Enrollment refused", metadata: ["code": "\(refusal.code)"])
                return Self.error(refusal.status, refusal.code, refusal.reason)
            }
            let (device, secret) = try await store.enroll(now: clock.now)
            metrics.enrolled()
            logger.notice("Device enrolled", metadata: ["device": "\(device)"])
            return Self.json(RelayEnrollment(url: "", device: device, secret: secret))
        }
        router.post("v1/uplink") { request, context in
            activity()
            guard let (device, secret) = Self.bearer(request.headers[.authorization]) else {
                return Self.error(
                    .unauthorized, "unauthorized",
                    "send Authorization: Bearer <device>.<secret> (bgctl push relay enroll)")
            }
            let known: Bool
            do {
                known = try await uplink.authenticate(device: device, secret: secret)
            } catch {
                return Self.error(
                    .serviceUnavailable, UplinkSession.unavailable,
                    "this relay node cannot reach its database; connect again")
            }
            guard known else {
                return Self.error(.unauthorized, "unauthorized", "unknown device or wrong secret; enroll again")
            }
            let session = uplink.session(of: device)
            var headers = HTTPFields()
            headers[.contentType] = "application/x-ndjson"
            return Response(
                status: .ok, headers: headers,
                body: ResponseBody { [stream = context.channel] writer in
                    // The whole connection: closing the stream alone queues a reset behind what
                    // the connection cannot write, so a device that reads nothing at all never
                    // sees it, and the stream never closes (a device's uplink is its connection).
                    try await session.run(reading: request.body, writer: writer) {
                        (stream.parent ?? stream).cutBeneathTLS()
                    }
                })
        }
        router.get("metrics") { _, _ in
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; version=0.0.4"
            return Response(
                status: .ok, headers: headers,
                body: .init(byteBuffer: ByteBuffer(string: await metrics.exposition(store: store, hub: hub))))
        }
        let boundPort = self.boundPort
        let application = QuietApplication(
            responder: router.buildResponder(), server: server,
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.port), serverName: "bgrelay"),
            onServerRunning: { channel in
                boundPort.set(channel.localAddress?.port ?? 0)
                logger.notice("Uplink is listening", metadata: ["port": "\(channel.localAddress?.port ?? 0)"])
            }, logger: logger)
        let grace = configuration.connections.shutdownGrace
        do {
            try await withGracefulShutdownHandler {
                try await boundPort.serve(
                    flag: "--uplink-port", address: "\(configuration.host):\(configuration.port)"
                ) { try await application.run() }
            } onGracefulShutdown: {
                // Sessions never end by themselves: end them, then cut what outlives the grace.
                hub.disconnectAll()
                Task {
                    try? await clock.sleep(for: grace)
                    gate.closeAll()
                }
            }
        } catch {
            await Self.endLineSessions(hub: hub, gate: gate, grace: grace, clock: clock)
            throw error
        }
        await Self.endLineSessions(hub: hub, gate: gate, grace: grace, clock: clock)
    }

    /// The server waited for its connections' tasks, but a line session has none (it runs in
    /// short tasks of its own): told the node stops, its device gets the grace to close (none
    /// when the server was cancelled), then what is left is cut — and this returns once every
    /// connection is closed, so no session outlives the node.
    private static func endLineSessions(
        hub: DeviceHub, gate: ConnectionGate, grace: Duration, clock: any WallClock
    ) async {
        hub.disconnectAll()
        if !Task.isCancelled { _ = try? await clock.within(grace) { await gate.drained() } }
        gate.closeAll()
        await gate.drained()
    }

    /// Whether `secret` is `device`'s. Bounded, as every store call of a session is: a database
    /// that never answers fails the device's attempt (it is told `unavailable` and connects
    /// again) and holds no connection open for good; the error is logged, and thrown.
    func authenticate(device: String, secret: String) async throws -> Bool {
        do {
            return try await clock.within(storeCallLimit) {
                try await store.authenticate(device: device, secret: secret)
            }
        } catch {
            logger.error("Cannot authenticate a device", metadata: ["device": "\(device)", "error": "\(error)"])
            throw error
        }
    }

    /// The uplink session of an authenticated device, whichever transport carries it.
    func session(of device: String) -> UplinkSession {
        UplinkSession(
            device: device, node: node, store: store, hub: hub, metrics: metrics, clock: clock, logger: logger,
            writeLimit: writeLimit, activity: activity)
    }

    /// "Bearer <device>.<secret>", split.
    static func bearer(_ header: String?) -> (String, String)? {
        guard let token = BearerToken.of(header) else { return nil }
        let parts = token.split(separator: ".", maxSplits: 1)
        guard parts.count == 2, parts[0].count <= 64, parts[1].count <= 128 else { return nil }
        return (String(parts[0]), String(parts[1]))
    }

    static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        let data = (try? JSONEncoder().encode(value)) ?? Data()
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    static func error(_ status: HTTPResponse.Status, _ code: String, _ reason: String) -> Response {
        json(["error": code, "reason": reason], status: status)
    }
}

/// Hummingbird's basic request context, and the request's channel: an uplink's HTTP/2 stream,
/// whose connection its session cuts when the device reads nothing (`StallBoundWriter`).
struct UplinkRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    let channel: any Channel

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}
