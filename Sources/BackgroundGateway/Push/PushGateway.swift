import BackgroundModel
import BackgroundPolicy
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import HummingbirdHTTP2
import HummingbirdTLS
import Logging
import NIOCore
import NIOSSL
import ServiceLifecycle
import Synchronization

/// An APNs-compatible listener — bgd's gateway, and bgrelay's provider side: `POST
/// /3/device/<token>` over HTTP/2 with TLS (ALPN h2, or no ALPN at all, as APNs accepts) on port
/// 2197 by default, so APNs client libraries work against it with the host, port and
/// certificate changed. Plaintext (HTTP/2 with prior knowledge) is for development and only on
/// loopback.
public struct PushGateway<Destinations: PushDestinations>: Service {
    public typealias Configuration = PushGatewayConfiguration
    public typealias Failure = PushGatewayFailure

    let configuration: Configuration
    let intake: PushIntake<Destinations>
    let certificateDirectory: String
    let clock: any WallClock
    let logger: Logger
    let serverName: String
    /// The option that sets the port, named when it cannot be listened on.
    let portFlag: String

    public init(
        configuration: Configuration, intake: PushIntake<Destinations>, certificateDirectory: String,
        clock: any WallClock, logger: Logger, serverName: String = "bgd-push", portFlag: String = "--push-port",
        boundPort: BoundPort = BoundPort()
    ) {
        self.portFlag = portFlag
        self.boundPort = boundPort
        self.configuration = configuration
        self.intake = intake
        self.certificateDirectory = certificateDirectory
        self.clock = clock
        self.logger = logger
        self.serverName = serverName
    }
    /// The port it listens on, once it does.
    public let boundPort: BoundPort

    /// What a provider on this machine puts before the port: the scheme for the gateway's
    /// security, and `localhost` for a loopback host (the self-signed certificate's name).
    public var baseURL: String {
        let scheme: String
        switch configuration.security {
        case .selfSigned, .files: scheme = "https"
        case .plaintext, .plaintextHTTP1: scheme = "http"
        }
        // Loopback and every-address listeners are reached here as localhost, a name the
        // self-signed certificate has (0.0.0.0 is no address to connect to, nor in it).
        let host =
            ["127.0.0.1", "::1", "localhost", "0.0.0.0", "::", "[::]"].contains(configuration.host)
            ? "localhost" : configuration.host
        return "\(scheme)://\(host.contains(":") ? "[\(host)]" : host)"
    }

    /// Where the gateway's self-signed certificate is, for clients to trust.
    public var certificatePath: String { certificateDirectory + "/push-gateway.crt" }

    public func run() async throws {
        let server: HTTPServerBuilder
        let gate: ConnectionGate
        do {
            (server, gate) = try Self.serverBuilder(
                configuration, certificateDirectory: certificateDirectory, now: clock.now)
        } catch {
            boundPort.failedToPrepare(error)
            throw error
        }
        let intake = self.intake
        let responder = CallbackResponder<PeerRequestContext> { request, context in
            try await Self.respond(to: request, peer: context.peer, intake: intake)
        }
        let boundPort = self.boundPort
        let logger = self.logger
        let application = QuietApplication(
            responder: responder, server: server,
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.port), serverName: serverName),
            onServerRunning: { channel in
                boundPort.set(channel.localAddress?.port ?? 0)
                logger.notice("Push gateway is listening", metadata: ["port": "\(channel.localAddress?.port ?? 0)"])
            }, logger: logger)
        // A graceful stop waits for open connections, but not for ever: one that never finished
        // its handshake, or a provider that keeps its stream open, is cut after the grace period.
        let clock = self.clock
        let grace = configuration.connections.shutdownGrace
        try await withGracefulShutdownHandler {
            try await boundPort.serve(flag: portFlag, address: "\(configuration.host):\(configuration.port)") {
                try await application.run()
            }
        } onGracefulShutdown: {
            Task {
                try? await clock.sleep(for: grace)
                if gate.openCount > 0 {
                    logger.notice(
                        "Closing push connections still open after the grace period",
                        metadata: ["open": "\(gate.openCount)"])
                }
                gate.closeAll()
            }
        }
    }

    /// The server for `configuration`'s security — TLS with HTTP/2 (ALPN h2 or none), or
    /// plaintext on loopback — each connection through a gate that enforces its limits. bgrelay's
    /// uplink listener is built the same way, its connections' buffers as `buffers` says, and
    /// under TLS offers `alternative` beside HTTP/2 to a client that names it in ALPN.
    package static func serverBuilder(
        _ configuration: PushGatewayConfiguration, certificateDirectory: String, now: Date,
        buffers: ConnectionBuffers? = nil, alternative: ALPNAlternative? = nil
    ) throws -> (HTTPServerBuilder, ConnectionGate) {
        let server: HTTPServerBuilder
        let gate = ConnectionGate(limits: configuration.connections)
        let http2 = Self.http2(idleTimeout: configuration.connections.idleTimeout)
        switch configuration.security {
        case .plaintext:
            guard configuration.isLoopback else { throw PushGatewayFailure.plaintextOffLoopback(configuration.host) }
            server = HTTPServerBuilder { responder in
                GuardedChannel(
                    base: ResetFilteredHTTP2Channel(responder: responder, configuration: http2), gate: gate,
                    buffers: buffers)
            }
        case .plaintextHTTP1:
            guard configuration.isLoopback else { throw PushGatewayFailure.plaintextOffLoopback(configuration.host) }
            // No handshake to time: HTTP/1's own idle timeout closes a silent connection.
            let idle = TimeAmount.nanoseconds(Int64(configuration.connections.idleTimeout.seconds * 1e9))
            server = HTTPServerBuilder { responder in
                GuardedChannel(
                    base: HTTP1Channel(responder: responder, configuration: .init(idleTimeout: idle)), gate: gate,
                    watchesHandshake: false, buffers: buffers)
            }
        case .selfSigned, .files:
            let paths: (certificate: String, key: String)
            if case .files(let certificate, let key) = configuration.security {
                paths = (certificate, key)
            } else {
                paths = try GatewayCertificate.loadOrCreate(
                    in: certificateDirectory, names: configuration.namesToCertify, now: now)
            }
            // NIOSSL picks the first of ours the client offers: a client offering the
            // alternative and h2 (bgd, which falls back to h2) gets the alternative.
            let tls = try GatewayTLS.server(
                certificate: paths.certificate, key: paths.key,
                protocols: (alternative.map { [$0.name] } ?? []) + ["h2"])
            // HTTP/2 whether or not the client names it in ALPN: APNs speaks nothing else over
            // TLS, and client libraries (aioapns, for one) start HTTP/2 without offering ALPN.
            let tlsConfiguration = tls
            // Built once when the server starts, so a bad certificate or key fails bgd's start.
            if let alternative {
                server = HTTPServerBuilder { responder in
                    GuardedChannel(
                        base: try TLSChannel(
                            LinesOrHTTP2Channel(
                                http2: ResetFilteredHTTP2Channel(responder: responder, configuration: http2),
                                alternative: alternative),
                            tlsConfiguration: tlsConfiguration),
                        gate: gate, buffers: buffers)
                }
            } else {
                server = HTTPServerBuilder { responder in
                    GuardedChannel(
                        base: try TLSChannel(
                            ResetFilteredHTTP2Channel(responder: responder, configuration: http2),
                            tlsConfiguration: tlsConfiguration),
                        gate: gate, buffers: buffers)
                }
            }
        }
        return (server, gate)
    }

    /// Every stream ends on its last frame, as APNs' do (see `EndStreamCoalescer`); a connection
    /// with no stream open for `idleTimeout` is closed.
    package static func http2(idleTimeout: Duration) -> HTTP2Channel.Configuration {
        HTTP2Channel.Configuration(
            idleTimeout: idleTimeout, gracefulCloseTimeout: .seconds(5),
            streamConfiguration: .init(additionalChannelHandlers: [EndStreamCoalescer.Installer()]))
    }

    /// Authenticates the provider before reading the body, then reads at most 5121 bytes of it —
    /// a larger one is refused without being buffered — and answers as APNs does: empty body and
    /// `apns-id` on success, `{"reason"}` otherwise.
    static func respond(to request: Request, peer: String, intake: PushIntake<Destinations>) async throws -> Response {
        let headers = request.headers.map { (name: $0.name.rawName, value: $0.value) }
        let answer: PushIntake<Destinations>.Answer
        switch await intake.authenticate(
            method: request.method.rawValue, path: request.uri.path, headers: headers, peer: peer)
        {
        case .refused(let refusal):
            answer = refusal
        case .authenticated(let provider):
            var body = Data()
            var size = 0
            for try await buffer in request.body {
                size += buffer.readableBytes
                if size > PushRequestLimit.maximumRead { break }
                body.append(contentsOf: buffer.readableBytesView)
            }
            answer = await intake.handle(
                provider, headers: headers, body: body, bodySize: min(size, PushRequestLimit.maximumRead))
        }
        var fields: HTTPFields = [HTTPField.Name("apns-id")!: answer.apnsID]
        guard let reason = answer.reason else { return Response(status: .ok, headers: fields) }
        var json = #"{"reason":"\#(reason.rawValue)""#
        if let timestamp = answer.timestamp { json += #","timestamp":\#(timestamp)"# }
        json += "}"
        fields[.contentType] = "application/json"
        return Response(
            status: .init(code: answer.status), headers: fields, body: .init(byteBuffer: ByteBuffer(string: json)))
    }
}

enum PushRequestLimit {
    /// One byte over the largest payload limit (a VoIP push's): enough to know it is too large.
    static let maximumRead = PushRequestValidator.maximumVoIPPayload + 1
}

/// Where a push listener listens, how it secures itself, and what it allows.
public struct PushGatewayConfiguration: Sendable {
    public enum Security: Sendable {
        /// A self-signed pair kept in the state directory, made on first start.
        case selfSigned
        /// The operator's certificate chain and key (PEM files).
        case files(certificate: String, key: String)
        /// No TLS: HTTP/2 with prior knowledge; refused unless the host is a loopback address.
        case plaintext
        /// No TLS, HTTP/1.1 (curl without flags); refused unless the host is a loopback address.
        case plaintextHTTP1
    }

    public var host: String
    /// 0: any free port (tests); `boundPort` says which.
    public var port: Int
    public var security: Security
    /// How many background pushes may wake an app, and how bursts are coalesced.
    public var throttle: PushThrottle
    /// How many pushes one device token accepts before answering 429 TooManyRequests.
    public var floodLimit: PushFloodLimit
    /// Connections per peer and in all, handshake and idle timeouts, the shutdown's grace.
    public var connections: ConnectionLimits
    /// The names clients reach the gateway by (DNS names or addresses), which a self-signed
    /// certificate must carry besides localhost and the loopback addresses: clients check it.
    public var certificateNames: [String] = []

    /// `certificateNames` and `host` when it is one address (not a wildcard or loopback).
    public var namesToCertify: [String] {
        let wildcard = ["0.0.0.0", "::", "[::]", "*"].contains(host)
        let names = certificateNames.filter { !$0.isEmpty }
        return names + (wildcard || isLoopback || names.contains(host) ? [] : [host])
    }

    public init(
        host: String = "127.0.0.1", port: Int = 2197, security: Security = .selfSigned,
        throttle: PushThrottle = PushThrottle(),
        floodLimit: PushFloodLimit = PushFloodLimit(), connections: ConnectionLimits = ConnectionLimits()
    ) {
        self.connections = connections
        self.throttle = throttle
        self.floodLimit = floodLimit
        self.host = host
        self.port = port
        self.security = security
    }

    public var isLoopback: Bool { Loopback.contains(host) }
}

public enum PushGatewayFailure: Error, CustomStringConvertible {
    case plaintextOffLoopback(String)
    public var description: String {
        switch self {
        case .plaintextOffLoopback(let host):
            "the push gateway serves plaintext only on loopback, not on \(host); give it a certificate"
        }
    }
}
