import BackgroundGateway
import BackgroundModel
import BackgroundPolicy
import Foundation
import Logging
import ServiceLifecycle

/// A relay node: the APNs provider API for providers (`provider`, port 2197 by default) and the
/// uplink devices connect out to (`uplink`, 2198), over one store.
public struct Relay: Sendable {
    public struct Configuration: Sendable {
        public var provider: PushGatewayConfiguration
        public var uplink: PushGatewayConfiguration
        /// Where the database and the self-signed certificate live.
        public var stateDirectory: String
        /// This node's name in claims (several nodes share one database).
        public var node: String
        /// How many pushes one provider key may send to this node (429 TooManyRequests beyond).
        public var providerLimit: PushFloodLimit
        public var retention: Retention
        public var enrollment: EnrollmentPolicy
        /// Whether the device port offers the uplink as lines straight on TLS (ALPN
        /// `bgrelay-uplink/1`) beside the HTTP/2 stream. Off, every device holds an HTTP/2 stream,
        /// as with a relay from before the lines (what bgd's fallback is tested against).
        public var offersLines = true
        /// An uplink whose device sends nothing, not even a keep-alive, this long is closed
        /// (`UplinkSilence`): more than bgd's longest keep-alive interval.
        public var uplinkSilence: Duration = .seconds(900)
        /// How long a write to a device may wait before its connection is cut
        /// (`StallBoundWriter`); nil, `uplinkSilence` (bgrelay has no flag of its own for it).
        public var uplinkWriteLimit: Duration?
        /// Several nodes: how often the connection that hears the others' commits is checked.
        public var listenerProbe = PostgresRelayStore.ListenerProbe()

        /// host:pid.
        public static var defaultNode: String {
            ProcessInfo.processInfo.hostName + ":" + String(ProcessInfo.processInfo.processIdentifier)
        }

        public init(
            provider: PushGatewayConfiguration = .init(port: 2197),
            uplink: PushGatewayConfiguration = .init(port: 2198), stateDirectory: String,
            node: String = defaultNode, providerLimit: PushFloodLimit = PushFloodLimit(perSecond: 5_000, burst: 50_000),
            retention: Retention = Retention(), enrollment: EnrollmentPolicy = EnrollmentPolicy()
        ) {
            self.enrollment = enrollment
            self.node = node
            self.retention = retention
            self.providerLimit = providerLimit
            self.provider = provider
            self.uplink = uplink
            self.stateDirectory = stateDirectory
        }
    }

    /// How long the store keeps pushes (`RelayPruner`).
    public struct Retention: Sendable {
        /// A push waits this long for its device at most, whatever its `apns-expiration`, then
        /// ends as expired (APNs, too, keeps a push for an offline device only "for a limited
        /// period").
        public var holdPending: Duration
        /// How long an ended push stays in the store (for operators, `/metrics` and checkers).
        public var keepEnded: Duration
        /// A device not seen this long (no uplink opened to any node, none held) is forgotten
        /// with its tokens and pushes: gone for good, or back only by enrolling again — after
        /// which its bgd registers its tokens anew.
        public var forgetDevices: Duration
        /// Between passes.
        public var interval: Duration

        public init(
            holdPending: Duration = .seconds(30 * 86400), keepEnded: Duration = .seconds(7 * 86400),
            forgetDevices: Duration = .seconds(90 * 86400), interval: Duration = .seconds(3600)
        ) {
            self.holdPending = holdPending
            self.keepEnded = keepEnded
            self.forgetDevices = forgetDevices
            self.interval = max(interval, .seconds(1))
        }
    }

    public let configuration: Configuration
    public let store: any RelayStore
    public let metrics = RelayMetrics()
    let hub = DeviceHub()
    let clock: any WallClock
    let logger: Logger
    public let providerPort = BoundPort()
    public let uplinkPort = BoundPort()
    /// Called on every provider request, enrollment, uplink and uplink round (not on a metrics
    /// scrape): bgrelay gives its code pages back once this has been quiet (`IdleCodePages`).
    let activity: @Sendable () -> Void

    public init(
        configuration: Configuration, store: any RelayStore, clock: any WallClock, logger: Logger,
        activity: @escaping @Sendable () -> Void = {}
    ) {
        self.configuration = configuration
        self.store = store
        self.clock = clock
        self.logger = logger
        self.activity = activity
    }

    /// Opens (creating) the node's database in its state directory.
    public static func openStore(in directory: String) throws -> SQLiteRelayStore {
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        return try SQLiteRelayStore.open(atPath: directory + "/" + databaseName)
    }

    /// The SQLite file a node on its own keeps in its state directory.
    public static let databaseName = "relay.sqlite"

    /// Where the self-signed certificate is (for devices and providers to trust).
    public var certificatePath: String { configuration.stateDirectory + "/push-gateway.crt" }

    /// The two listeners, to run in a `ServiceGroup`. The self-signed pair both serve is made
    /// here, once: two listeners making it at the same time each wrote their own.
    public func makeServices() throws -> [any Service] {
        if case .selfSigned = configuration.provider.security {
            var names: [String] = []
            for name in configuration.provider.namesToCertify + configuration.uplink.namesToCertify
            where !names.contains(name) {
                names.append(name)
            }
            _ = try GatewayCertificate.loadOrCreate(in: configuration.stateDirectory, names: names, now: clock.now)
        }
        let (metrics, activity) = (self.metrics, self.activity)
        let destinations = RelayDestinations(store: store, hub: hub, clock: clock, logger: logger)
        let intake = PushIntake(
            destinations: destinations, clock: clock, floodLimit: configuration.provider.floodLimit,
            providerLimit: configuration.providerLimit,
            answered: {
                metrics.answered(status: $0)
                activity()
            })
        var services: [any Service] = []
        if let shared = store as? PostgresRelayStore {
            services.append(
                Follower(store: shared, hub: hub, probe: configuration.listenerProbe, clock: clock, logger: logger))
        }
        services.append(
            UplinkSilence(limit: configuration.uplinkSilence, hub: hub, metrics: metrics, clock: clock, logger: logger))
        services.append(
            RelayPruner(store: store, hub: hub, retention: configuration.retention, metrics: metrics, clock: clock, logger: logger))
        return services + [
            PushGateway(
                configuration: configuration.provider, intake: intake,
                certificateDirectory: configuration.stateDirectory, clock: clock, logger: logger, serverName: "bgrelay",
                portFlag: "--port", boundPort: providerPort),
            UplinkServer(
                configuration: configuration.uplink, store: store, hub: hub, metrics: metrics,
                certificateDirectory: configuration.stateDirectory, clock: clock, logger: logger, boundPort: uplinkPort,
                node: configuration.node, enrollment: EnrollmentGate(configuration.enrollment),
                offersLines: configuration.offersLines, writeLimit: configuration.uplinkWriteLimit ?? configuration.uplinkSilence,
                activity: activity),
        ]
    }
}

/// Hears what the other nodes commit (PostgreSQL's LISTEN): rings this node's sessions of the
/// devices with new pushes, and moves the credentials version the provider side checks. Listens
/// again after a lost connection, and once listening again rings every session: what was
/// committed while it was not listening was never heard.
struct Follower: Service {
    let store: PostgresRelayStore
    let hub: DeviceHub
    let probe: PostgresRelayStore.ListenerProbe
    let clock: any WallClock
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            var pause = Duration.milliseconds(100)
            while !Task.isCancelled {
                let started = clock.elapsed
                do {
                    try await store.follow(probing: probe, on: clock, onListening: { [hub] in hub.ringAll() }) {
                        [hub] device in hub.ring([device])
                    }
                } catch is CancellationError {
                    return
                } catch {
                    logger.warning("Lost PostgreSQL notifications; listening again", metadata: ["error": "\(error)"])
                }
                // A listener that held for a while lost it afresh: quick to retry again.
                if clock.elapsed - started > .seconds(30) { pause = .milliseconds(100) }
                try await clock.sleep(for: pause)
                pause = min(pause * 2, .seconds(5))
            }
        }
    }
}
