import ArgumentParser
import BackgroundDaemon
import BackgroundGateway
import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Logging
import QuietThreads
import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The daemon: decides when apps run in the background, and runs them.
struct BGD: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bgd",
        abstract: "The swift-background daemon: wakes apps for background fetch and runs them within a budget.",
        discussion: """
            State lives in --state-dir (SQLite, WAL); apps and bgctl talk to it over --socket.

            Exit status: 0 stopped; 1 could not start (the reason on stderr); 64 bad usage; 69 a \
            port in use (--push-port, --http); 75 another bgd holds the state directory or socket; \
            78 a configuration to fix (a push certificate, the socket systemd passed).
            """,
        version: Daemon.version)

    /// The defaults of options parsed by a transform, which argument-parser cannot show: each is
    /// written once, here, and its help says it.
    enum Defaults {
        static let unusedAppInterval: Duration = .seconds(6 * 3600)
        static let fetchBudget: Duration = .seconds(30)
        static let expirationLead: Duration = .seconds(5)
        static let killGrace: Duration = .seconds(5)
        static let fetchFloor: Duration = .seconds(15 * 60)
        static let keepHistory: Duration = .seconds(30 * 86400)
        static let transferCheckpoint: Int64 = 8 << 20
        static let transferReadTimeout: Duration = .seconds(30)
        static let pushRelayKeepAlive: Duration = .seconds(270)
        static let pushHandshakeTimeout: Duration = .seconds(10)
        static let pushIdleTimeout: Duration = .seconds(300)
        static let backgroundTime: Duration = .seconds(30)
        static let suspensionDelay: Duration = .seconds(5)
        static let processingBudget: Duration = .seconds(600)
    }

    static func shown(_ duration: Duration) -> String { duration.humanDescription }
    static func shown(_ bytes: Int64) -> String {
        bytes % (1 << 30) == 0
            ? "\(bytes >> 30)GiB"
            : bytes % (1 << 20) == 0 ? "\(bytes >> 20)MiB" : bytes % (1 << 10) == 0 ? "\(bytes >> 10)KiB" : "\(bytes)"
    }

    @Option(help: "Where bgd keeps its state (default: $XDG_STATE_HOME/bgd, else ~/.local/state/bgd).")
    var stateDir: String?

    @Option(
        help:
            "The control socket (default: $BGD_SOCKET, else $XDG_RUNTIME_DIR/bgd/bgd.sock, else /run/user/UID/bgd/bgd.sock if there, else <state-dir>/run/bgd.sock)."
    )
    var socket: String?

    @Option(
        help: "How long a background fetch may run (default: \(BGD.shown(BGD.Defaults.fetchBudget))).",
        transform: parseDuration)
    var fetchBudget: Duration = BGD.Defaults.fetchBudget

    @Option(
        help:
            "How long before the budget ends the app is told to expire (default: \(BGD.shown(BGD.Defaults.expirationLead))).",
        transform: parseDuration)
    var expirationLead: Duration = BGD.Defaults.expirationLead

    @Option(
        help: "How long after SIGTERM an app is killed (default: \(BGD.shown(BGD.Defaults.killGrace))).",
        transform: parseDuration)
    var killGrace: Duration = BGD.Defaults.killGrace

    @Option(
        help:
            "No app is woken for fetch more often than this (the 'minimum' interval; default: \(BGD.shown(BGD.Defaults.fetchFloor))).",
        transform: parseDuration)
    var fetchFloor: Duration = BGD.Defaults.fetchFloor

    @Option(
        help:
            "Apps never opened (no opens reported by the SDK or `bgctl open`) are woken at most this often; 'interval' wakes them on their fetch interval (default: \(BGD.shown(BGD.Defaults.unusedAppInterval))).",
        transform: { $0 == "interval" ? nil : try parseDuration($0) })
    var unusedAppInterval: Duration? = BGD.Defaults.unusedAppInterval

    @Option(
        help:
            "Finished work older than this is deleted (ended runs, acknowledged events, ended transfers, settled pushes; each app's latest 20 runs, runs of the last 28d and anything still waited for stay); a transfer's events an app has not acknowledged in this long expire, with a download it never claimed (default: \(BGD.shown(BGD.Defaults.keepHistory))).",
        transform: parseDuration)
    var keepHistory: Duration = BGD.Defaults.keepHistory

    @Option(
        help:
            "How opens become fetch wakes: 'learned' (a per-user model of the chance of an open in the next hour, the default) or 'adaptive' (hour-of-day rates with lifts, the planner before it)."
    )
    var fetchPlanner: UsageTracker.Planner = .learned

    @Option(
        help:
            "Where power and network are read from: a sysfs root (default /sys), or 'unconstrained' to assume mains power and an unmetered network."
    )
    var conditions: String = "/sys"

    @Option(
        help:
            "How often power and network are read again besides when the kernel says they changed (default: 10m, or 1m where the kernel's netlink events cannot be heard).",
        transform: parseDuration)
    var conditionsPoll: Duration?

    @Option(help: "Background transfers moving bytes at once.")
    var maxTransfers: Int = 6

    @Option(
        help:
            "Bytes between a download's durable checkpoints, the most a crash makes it fetch again (default: \(BGD.shown(BGD.Defaults.transferCheckpoint))).",
        transform: parseSize)
    var transferCheckpoint: Int64 = BGD.Defaults.transferCheckpoint

    @Option(
        help: "Bytes a second all downloads together may receive, e.g. 10MiB (default: no cap).", transform: parseSize)
    var transferRateLimit: Int64?

    @Option(
        help:
            "Bytes of waiting uploads bgd holds for one app (it copies each when handed over), e.g. 1GiB, or 'off' (default: \(BGD.shown(TransferService.Configuration.defaultUploadQuota))).",
        transform: { $0 == "off" ? nil : try parseSize($0) })
    var uploadQuota: Int64? = TransferService.Configuration.defaultUploadQuota

    @Option(
        help:
            "A transfer whose connection is silent this long is dropped and retried (default: \(BGD.shown(BGD.Defaults.transferReadTimeout))).",
        transform: parseDuration)
    var transferReadTimeout: Duration = BGD.Defaults.transferReadTimeout

    @Option(help: "The APNs-compatible push gateway's port (HTTP/2 over TLS), or 'off'.")
    var pushPort: String = "2197"

    @Option(help: "The address the push gateway listens on.")
    var pushHost: String = "127.0.0.1"

    @Option(
        help: "The push gateway's certificate chain (PEM); default: a self-signed pair made in the state directory.")
    var pushCertificate: String?

    @Option(help: "The push gateway's private key (PEM), with --push-certificate.")
    var pushKey: String?

    @Option(
        help:
            "A name (or address) providers reach the push gateway by, when --push-host listens beyond loopback; repeat for several. The self-signed certificate names each, besides localhost, the loopback addresses, this machine's host name and --push-host."
    )
    var pushCertificateName: [String] = []

    @Flag(help: "Serve pushes as plaintext HTTP/2 (prior knowledge), for development; loopback only.")
    var pushPlaintext = false

    @Flag(help: "Serve pushes as plaintext HTTP/1.1 (plain curl), for development; loopback only.")
    var pushHttp1 = false

    @Option(help: "Background pushes that may wake one app per hour.")
    var pushWakesPerHour: Double = 3

    @Option(
        help:
            "A push relay's uplink (https://host:2198; several nodes of one relay comma-separated, tried in turn) to connect out to, for providers that cannot reach this machine; bgd enrolls with it on first start."
    )
    var pushRelay: String?

    @Option(
        help:
            "How often the relay uplink checks, when idle, that the connection still answers (an empty line, echoed; a silent one is replaced); 1s to 10m, as a relay closes an uplink silent for 15m (default: \(BGD.shown(BGD.Defaults.pushRelayKeepAlive))).",
        transform: parseDuration)
    var pushRelayKeepAlive: Duration = BGD.Defaults.pushRelayKeepAlive

    @Option(help: "A CA certificate (PEM) to trust for --push-relay (a relay's self-signed push-gateway.crt).")
    var pushRelayCa: String?

    @Option(
        help:
            "The token a relay started with --enrollment-token asks of a device to enroll (used once, at the first start with --push-relay; the device's own credential after that)."
    )
    var pushRelayEnrollmentToken: String?

    @Option(
        help: "Pushes per second one device token accepts (ten times as many back to back) before 429 TooManyRequests.")
    var pushTokenRate: Double = 20

    @Option(
        help:
            "on: apps bgd launches may read everything but bgd's state and write only their container (Landlock, where the kernel has it); off: not confined."
    )
    var confineApps: String = "on"

    @Option(
        help:
            "on: each app in a cgroup of its own (frozen to suspend, ended whole), where bgd may make them; off: signals only."
    )
    var appCgroups: String = "on"

    @Option(help: "Open push connections from one address; more are closed as they arrive.")
    var pushConnectionsPerPeer: Int = 128

    @Option(help: "Open push connections in all; more are closed as they arrive.")
    var pushConnections: Int = 1024

    @Option(
        help:
            "How long a new push connection may take to finish its TLS handshake before it is closed (default: \(BGD.shown(BGD.Defaults.pushHandshakeTimeout))).",
        transform: parseDuration)
    var pushHandshakeTimeout: Duration = BGD.Defaults.pushHandshakeTimeout

    @Option(
        help:
            "How long a push connection with no stream open stays before it is closed (default: \(BGD.shown(BGD.Defaults.pushIdleTimeout))).",
        transform: parseDuration)
    var pushIdleTimeout: Duration = BGD.Defaults.pushIdleTimeout

    @Option(
        help:
            "Background time an app gets after leaving the foreground (beginBackgroundTask) (default: \(BGD.shown(BGD.Defaults.backgroundTime))).",
        transform: parseDuration)
    var backgroundTime: Duration = BGD.Defaults.backgroundTime

    @Option(
        help:
            "on: an app whose background time is up (holding no task) is suspended until an event comes: frozen in its cgroup (cgroup.freeze) in cgroups mode, else stopped with SIGSTOP if it has no terminal (bgctl status says which mode); off: it is ended."
    )
    var suspension: String = "on"

    @Option(
        help:
            "How long an app with nothing to do keeps running after leaving the foreground (or an event) before it is suspended (default: \(BGD.shown(BGD.Defaults.suspensionDelay))).",
        transform: parseDuration)
    var suspensionDelay: Duration = BGD.Defaults.suspensionDelay

    @Option(
        help: "How long a BGProcessingTaskRequest may run (default: \(BGD.shown(BGD.Defaults.processingBudget))).",
        transform: parseDuration)
    var processingBudget: Duration = BGD.Defaults.processingBudget

    @Option(
        help:
            "Serve the dashboard and /metrics on HOST:PORT, e.g. 127.0.0.1:8765 (off unless given; loopback only unless --http-allow-remote)."
    )
    var http: String?

    @Flag(help: "Let --http listen on an address other machines can reach (the dashboard token still guards it).")
    var httpAllowRemote = false

    @Option(help: "full: every commit survives power loss; normal: survives crashes of bgd, faster.")
    var durability: String = "full"

    @Option(help: "trace, debug, info, notice, warning, error or critical.")
    var logLevel: String = "notice"

    @Option(
        help:
            "auto (journal when stderr is systemd's journal, else text), journal (journald's native protocol, a field per metadata key such as APP_ID=, when its socket is there; else <priority>-prefixed lines with key=value metadata on stderr) or text."
    )
    var logFormat: String = "auto"

    @Flag(
        help:
            "Check the other options and exit: status 0 if bgd would start with them, 64 and the reason if not (78 for a --push-certificate pair TLS cannot use). Starts nothing and touches no state (bgctl install-service checks --arguments so)."
    )
    var check = false

    /// --state-dir, or the default.
    var stateDirectory: String { stateDir ?? DaemonLocation.defaultStateDirectory() }
    /// --socket, or the default (which may be in the state directory).
    var socketPath: String { socket ?? DaemonLocation.defaultSocketPath(stateDirectory: stateDirectory) }

    func validate() throws {
        // Said before anything starts, and by --check (bgctl install-service): a path the kernel
        // cannot bind failed only once bgd was starting.
        guard socketPath.utf8.count < 104 else {
            throw ValidationError(
                "the socket path is \(socketPath.utf8.count) bytes, and a Unix socket path must be shorter than 104: pass a shorter --socket (or --state-dir)"
            )
        }
        for node in (pushRelay ?? "").split(separator: ",") {
            let node = node.trimmingCharacters(in: .whitespaces)
            if let problem = ServerURL.problem(with: node) {
                throw ValidationError(
                    "--push-relay is a relay's uplink URL, e.g. https://relay.example.net:2198: '\(node)' \(problem)")
            }
        }
        guard pushRelayKeepAlive >= .seconds(1), pushRelayKeepAlive <= .seconds(600) else {
            // A relay closes an uplink it heard nothing from for 15 minutes (bgrelay --uplink-silence).
            throw ValidationError("--push-relay-keep-alive is 1s to 10m (a relay closes an uplink silent for 15m)")
        }
        if pushRelayCa != nil, pushRelay == nil { throw ValidationError("--push-relay-ca goes with --push-relay") }
        if pushRelayEnrollmentToken != nil, pushRelay == nil {
            throw ValidationError("--push-relay-enrollment-token goes with --push-relay")
        }
        if let pushRelayCa, !FileManager.default.isReadableFile(atPath: pushRelayCa) {
            throw ValidationError("cannot read --push-relay-ca \(pushRelayCa)")
        }
        guard keepHistory >= .seconds(86400) else {
            throw ValidationError("--keep-history must be at least 1d: the fetch policy reads the last day of runs")
        }
        guard BackgroundStore.Durability(rawValue: durability) != nil else {
            throw ValidationError("--durability must be 'full' or 'normal'")
        }
        guard ["auto", "journal", "text"].contains(logFormat) else {
            throw ValidationError("--log-format is auto, journal or text")
        }
        guard Logger.Level(rawValue: logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        if pushPort != "off" {
            guard let port = Int(pushPort), (0...65535).contains(port) else {
                throw ValidationError("--push-port is a port number or 'off'")
            }
        }
        guard (pushCertificate == nil) == (pushKey == nil) else {
            throw ValidationError("give --push-certificate and --push-key together")
        }
        guard !(pushPlaintext && pushHttp1) else {
            throw ValidationError("give --push-plaintext or --push-http1, not both")
        }
        if pushPlaintext || pushHttp1, !Loopback.contains(pushHost) {
            throw ValidationError(
                "the push gateway serves plaintext only on loopback (127.0.0.1, ::1, localhost), not on \(pushHost); drop --push-plaintext/--push-http1 to serve TLS"
            )
        }
        // Finite and bounded: infinity (or 1e19) passed and then trapped bgd at the first push.
        // The benchmarks lift the throttle with 36000000 (10,000 a second).
        guard pushWakesPerHour > 0, pushWakesPerHour <= 1e9 else {
            throw ValidationError("--push-wakes-per-hour is more than 0 and at most 1000000000")
        }
        if let socket, socket.isEmpty { throw ValidationError("--socket is a path; leave it out for the default") }
        if let stateDir, stateDir.isEmpty {
            throw ValidationError("--state-dir is a path; leave it out for the default")
        }
        guard fetchFloor >= .seconds(1) else {
            throw ValidationError("--fetch-floor is at least 1s (a floor of nothing launches apps in a loop)")
        }
        guard transferReadTimeout >= .seconds(1) else {
            throw ValidationError("--transfer-read-timeout is at least 1s")
        }
        if let http {
            guard let settings = Self.dashboard(http, allowRemote: httpAllowRemote) else {
                throw ValidationError("--http is HOST:PORT, e.g. 127.0.0.1:8765")
            }
            guard settings.isLoopback || httpAllowRemote else {
                throw ValidationError(
                    "--http \(http) is not a loopback address; the dashboard listens on loopback only unless you add --http-allow-remote"
                )
            }
        }
        guard ["on", "off"].contains(suspension) else { throw ValidationError("--suspension is 'on' or 'off'") }
        guard backgroundTime > expirationLead else {
            throw ValidationError("--background-time must be longer than --expiration-lead")
        }
        guard processingBudget > expirationLead else {
            throw ValidationError("--processing-budget must be longer than --expiration-lead")
        }
        guard pushTokenRate > 0 else { throw ValidationError("--push-token-rate must be positive") }
        guard maxTransfers >= 1 && maxTransfers <= 1000 else {
            throw ValidationError("--max-transfers is from 1 to 1000")
        }
        if let transferRateLimit, transferRateLimit < 1024 {
            throw ValidationError("--transfer-rate-limit is at least 1KiB (a second)")
        }
        guard transferCheckpoint >= 64 << 10 else { throw ValidationError("--transfer-checkpoint is at least 64KiB") }
        if let uploadQuota, uploadQuota < 1 << 20 {
            throw ValidationError("--upload-quota is at least 1MiB, or 'off'")
        }
        guard ["on", "off"].contains(confineApps) else { throw ValidationError("--confine-apps is on or off") }
        guard ["on", "off"].contains(appCgroups) else { throw ValidationError("--app-cgroups is on or off") }
        guard pushConnectionsPerPeer >= 1, pushConnections >= pushConnectionsPerPeer else {
            throw ValidationError("--push-connections-per-peer must be at least 1 and no more than --push-connections")
        }
        guard pushHandshakeTimeout > .zero, pushIdleTimeout > .zero else {
            throw ValidationError("--push-handshake-timeout and --push-idle-timeout must be positive")
        }
        guard (conditionsPoll ?? .seconds(1)) >= .seconds(1) else {
            throw ValidationError("--conditions-poll must be at least 1s")
        }
        // A mistyped root read as "no battery, no network": mains power and an unmetered network,
        // for good, with nothing said.
        var isDirectory: ObjCBool = false
        guard
            conditions == "unconstrained"
                || (FileManager.default.fileExists(atPath: conditions + "/class", isDirectory: &isDirectory)
                    && isDirectory.boolValue)
        else {
            throw ValidationError(
                "--conditions is 'unconstrained' or a sysfs root with a class/ directory (default /sys); '\(conditions)' is neither"
            )
        }
        guard fetchBudget > .zero, expirationLead < fetchBudget else {
            throw ValidationError("--fetch-budget must be positive and longer than --expiration-lead")
        }
    }

    var pushConfiguration: PushGatewayConfiguration? {
        guard pushPort != "off", let port = Int(pushPort) else { return nil }
        let security: PushGatewayConfiguration.Security =
            pushPlaintext
            ? .plaintext
            : pushHttp1
                ? .plaintextHTTP1 : pushCertificate.map { .files(certificate: $0, key: pushKey ?? "") } ?? .selfSigned
        var configuration = PushGatewayConfiguration(
            host: pushHost, port: port, security: security, throttle: PushThrottle(wakesPerHour: pushWakesPerHour),
            floodLimit: PushFloodLimit(perSecond: pushTokenRate, burst: pushTokenRate * 10),
            connections: ConnectionLimits(
                perPeer: pushConnectionsPerPeer, total: pushConnections, handshakeTimeout: pushHandshakeTimeout,
                idleTimeout: pushIdleTimeout))
        configuration.certificateNames = pushCertificateName
        return configuration
    }

    /// The learned model reads the user's local time of day and week, each open in the offset of
    /// its own moment (daylight saving time changes it twice a year).
    var usageConfiguration: UsageTracker.Configuration {
        UsageTracker.Configuration(planning: fetchPlanner, learned: .init(history: .init(timeZone: .current)))
    }

    func run() async throws {
        if check {
            // The pair the gateway would serve, as it would load it (a file missing or not PEM).
            if let pushCertificate, let pushKey {
                do {
                    _ = try GatewayTLS.server(certificate: pushCertificate, key: pushKey, protocols: ["h2"])
                } catch {
                    FileHandle.standardError.write(Data("bgd: \(error)\n".utf8))
                    throw ExitCode(78)  // EX_CONFIG, as at start
                }
            }
            return print("bgd: the options are good")
        }
        // The store, the token hashes and app logs are the user's alone; the operator's downloads
        // get the mode the user's own files get, from the umask bgd was started with.
        let userUmask = umask(0o077)
        let level = Logger.Level(rawValue: logLevel) ?? .notice
        let journal =
            logFormat == "journal"
            || (logFormat == "auto" && ProcessInfo.processInfo.environment["JOURNAL_STREAM"] != nil)
        // journald's native socket: under systemd, or where a test listens in its place.
        let environment = ProcessInfo.processInfo.environment
        let nativeJournal =
            environment["BGD_JOURNAL_SOCKET"]
            ?? (environment["JOURNAL_STREAM"] != nil
                && FileManager.default.fileExists(atPath: "/run/systemd/journal/socket")
                ? "/run/systemd/journal/socket" : nil)
        LoggingSystem.bootstrap { label in
            if journal { return JournalLogHandler(label: label, logLevel: level, nativeSocket: nativeJournal) }
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "bg.daemon")
        // Started by bgd.socket: serve the socket systemd listens on (sd_listen_fds).
        let activated: ActivatedSocket?
        do {
            activated = try ActivatedSocket.take()
        } catch {
            FileHandle.standardError.write(Data("bgd: \(error)\n".utf8))
            throw ExitCode(78)  // EX_CONFIG
        }
        if let activated, activated.path != socketPath {
            logger.notice(
                "Serving the socket systemd passed, not the configured one",
                metadata: ["socket": "\(activated.path)", "configured": "\(socketPath)"])
        }
        let configuration = Daemon.Configuration(
            stateDirectory: stateDirectory, socketPath: socketPath,
            durability: BackgroundStore.Durability(rawValue: durability) ?? .full,
            budget: RunBudget(budget: fetchBudget, expirationLead: expirationLead, killGrace: killGrace),
            fetchPolicy: FetchPolicy.Configuration(systemFloor: fetchFloor, unusedAppInterval: unusedAppInterval),
            usage: usageConfiguration,
            conditions: .init(
                sensing: conditions == "unconstrained" ? .fixed(.unconstrained) : .sysfs(root: conditions),
                pollInterval: conditionsPoll),
            transfers: .init(
                maximumConcurrent: maxTransfers,
                engine: .init(
                    checkpointInterval: transferCheckpoint, readTimeout: transferReadTimeout,
                    bandwidthLimit: transferRateLimit, userUmask: userUmask),
                uploadQuota: uploadQuota),
            push: pushConfiguration,
            backgroundTime: BackgroundTimePolicy(
                budget: backgroundTime, expirationLead: expirationLead, suspensionEnabled: suspension == "on",
                suspensionDelay: suspensionDelay),
            processing: ProcessingTaskPolicy(budget: processingBudget),
            dashboard: http.flatMap { Self.dashboard($0, allowRemote: httpAllowRemote) },
            confineApps: confineApps == "on",
            appCgroups: appCgroups == "on",
            retention: .init(retention: .init(history: keepHistory, opens: max(keepHistory, .seconds(90 * 86400)))),
            activatedSocket: activated, releasesIdleCodePages: IdleCodePages.isEnabled(unless: "BGD_KEEP_CODE_PAGES"),
            pushRelay: .init(
                url: pushRelay, certificate: pushRelayCa.map { URL(fileURLWithPath: $0).standardizedFileURL.path },
                enrollmentToken: pushRelayEnrollmentToken,
                keepAlive: pushRelayKeepAlive,
                answerWithin: min(.seconds(30), pushRelayKeepAlive)))
        let daemon: Daemon
        do {
            daemon = try await Daemon(
                configuration: configuration, clock: quietExecutor ? SystemClock.withAlarm() : SystemClock(),
                logger: logger)
        } catch let error as StateDirectory.AlreadyInUse {
            FileHandle.standardError.write(Data("bgd: \(error)\n".utf8))
            throw ExitCode(75)  // EX_TEMPFAIL
        } catch let error as SocketInUse {
            FileHandle.standardError.write(Data("bgd: \(error)\n".utf8))
            throw ExitCode(75)  // as for a state directory in use
        } catch let error as BackgroundStore.Damaged {
            FileHandle.standardError.write(Data("bgd: \(error)\n".utf8))
            throw ExitCode(78)  // EX_CONFIG: starting again will not mend it
        } catch let error as BackgroundStore.MadeByANewerBgd {
            FileHandle.standardError.write(Data("bgd: \(error)\n".utf8))
            throw ExitCode(78)  // as a damaged store: starting again will not mend it
        } catch {
            FileHandle.standardError.write(Data("bgd: cannot start: \(error)\n".utf8))
            throw ExitCode.failure
        }
        let group = ServiceGroup(
            configuration: .init(
                services: [daemon], gracefulShutdownSignals: quietExecutor ? [] : [.sigterm, .sigint],
                cancellationSignals: [], logger: logger))
        if quietExecutor { SignalWaiter.shared.onSignal { Task { await group.triggerGracefulShutdown() } } }
        do {
            try await group.run()
        } catch let error as ListenerFailed {
            FileHandle.standardError.write(Data("bgd: \(error)\n".utf8))
            throw ExitCode(EX_UNAVAILABLE_CODE)
        } catch
            where error is GatewayCertificate.MissingNames || error is GatewayCertificate.Damaged
            || error is UnusableCertificatePair
        {
            // A certificate to fix (one lacking a name is kept, not replaced behind the devices
            // that trust it): the operator decides.
            FileHandle.standardError.write(Data("bgd: \(error)\n".utf8))
            throw ExitCode(78)  // EX_CONFIG, as bgrelay
        }
        logger.notice("bgd stopped")
    }
}

/// sysexits' EX_UNAVAILABLE: a service bgd needs (a port) is not available.
let EX_UNAVAILABLE_CODE: Int32 = 69

func parseDuration(_ text: String) throws -> Duration {
    guard let duration = Duration(parsingHuman: text) else {
        throw ValidationError(
            "'\(text)' is not a duration of at most 31 years; write it like 30s, 15m, 2h, 3d or 500ms")
    }
    return duration
}

/// "8MiB", "512KiB", "1048576": a size in bytes.
func parseSize(_ text: String) throws -> Int64 {
    let units: [(String, Int64)] = [
        ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10), ("B", 1),
    ]
    for (suffix, factor) in units where text.hasSuffix(suffix) {
        if let number = Int64(text.dropLast(suffix.count)), number >= 0 {
            let (bytes, overflow) = number.multipliedReportingOverflow(by: factor)
            guard !overflow else { throw ValidationError("'\(text)' is more bytes than bgd can count") }
            return bytes
        }
    }
    if let number = Int64(text), number >= 0 { return number }
    throw ValidationError("'\(text)' is not a size; write it like 8MiB, 512KiB or 1048576")
}

extension BGD {
    /// `HOST:PORT` (`[::1]:PORT` for IPv6) into the dashboard's settings.
    static func dashboard(_ text: String, allowRemote: Bool) -> DashboardServer.Configuration? {
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
            (0...65535).contains(port)
        else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { return nil }
        return DashboardServer.Configuration(host: host, port: port, allowRemote: allowRemote)
    }
}

extension UsageTracker.Planner: ExpressibleByArgument {}
