import ArgumentParser
import BackgroundGateway
import BackgroundModel
import BackgroundPolicy
import BackgroundProviderKeys
import BackgroundRelay
import Foundation
import Logging
import QuietThreads
import ServiceLifecycle
import Synchronization

/// The push relay: providers send it pushes with the APNs provider API; devices (bgd) connect
/// out to it and receive theirs — for devices behind NAT, which no provider can reach.
struct BGRelay: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bgrelay",
        abstract: "The swift-background push relay: the APNs provider API for providers, an uplink for devices.",
        discussion: """
            Providers POST /3/device/<token> to --port exactly as they would to APNs (HTTP/2, TLS, \
            ES256 provider tokens). Each bgd started with --push-relay keeps one connection to \
            --uplink-port, registers its apps' device tokens, and receives their pushes; a push waits \
            here, committed, until its device acknowledges it or it expires.

            Exit status: 0 stopped; 3 no such key (keys remove); 64 bad usage; 69 a port in use, or \
            the database cannot be opened or reached (systemd restarts the unit: PostgreSQL may not \
            be up yet); 78 a certificate to fix (not PEM, or lacking a --certificate-name).
            """,
        version: "0.1.0",
        subcommands: [Serve.self, Keys.self, SystemdUnit.self], defaultSubcommand: Serve.self)
}

struct RelayOptions: ParsableArguments {
    @Option(
        help:
            "Where the relay keeps its database and certificate (default: $XDG_STATE_HOME/bgrelay, else ~/.local/state/bgrelay)."
    )
    var stateDir: String?

    @Option(
        help:
            "Keep the relay's state in PostgreSQL (postgres://user:password@host:port/database), shared by every node given the same URL; default: SQLite in --state-dir, for one node."
    )
    var database: String?

    @Option(
        help:
            "A file holding --database's URL, so that its password shows in neither ps nor a unit (bgrelay systemd-unit --database-file hands it to the service)."
    )
    var databaseFile: String?

    func validate() throws {
        if let stateDir, stateDir.isEmpty {
            throw ValidationError("--state-dir is a path; leave it out for the default")
        }
        if database != nil && databaseFile != nil {
            throw ValidationError("give --database or --database-file, not both")
        }
    }

    /// `--database`, or what `--database-file` holds (nil: SQLite in the state directory).
    func databaseURL() throws -> String? {
        guard let databaseFile else { return database }
        let url = try SecretFile.firstLine(of: databaseFile, option: "--database-file")
        guard !url.isEmpty else {
            throw ValidationError(
                "--database-file \(databaseFile) holds no URL; put one line in it: postgres://user:password@host:port/database"
            )
        }
        return url
    }

    var stateDirectory: String {
        if let stateDir { return stateDir }
        let environment = ProcessInfo.processInfo.environment
        let base = environment["XDG_STATE_HOME"] ?? (NSHomeDirectory() + "/.local/state")
        return base + "/bgrelay"
    }

    /// The store, prepared, and a task that runs what it needs while it is used (PostgreSQL's
    /// connection pool; nothing for SQLite): cancel it when done.
    func openStore(logger: Logger = Logger(label: "bgrelay")) async throws -> (any RelayStore, Task<Void, Never>) {
        // Not a usage error (64), which the unit does not restart: a database not up yet at boot,
        // or a disk that comes back, is worth another start.
        func unavailable(_ sentence: String) -> ExitCode {
            FileHandle.standardError.write(Data("bgrelay: \(sentence)\n".utf8))
            return ExitCode(69)  // EX_UNAVAILABLE
        }
        guard let database = try databaseURL() else {
            do {
                return (try Relay.openStore(in: stateDirectory), Task {})
            } catch {
                throw unavailable(
                    "cannot open the relay's database in \(stateDirectory): \(SystemErrorText.describe(error))")
            }
        }
        let store: PostgresRelayStore
        do {
            store = try PostgresRelayStore(url: database, logger: logger)
        } catch {
            throw ValidationError("--database: \(error)")
        }
        let pool = Task { await store.runPool() }
        do {
            // Bounded: the pool retries an address nothing answers at for over a minute.
            try await SystemClock().within(.seconds(15)) { try await store.prepare() }
        } catch {
            pool.cancel()
            let server = URLComponents(string: database).map { "\($0.host ?? "?"):\($0.port ?? 5432)" } ?? "--database"
            let why = error is DeadlineExceeded ? "no answer within 15 s" : String(reflecting: error)
            throw unavailable(
                "cannot use the PostgreSQL database at \(server) (is it running, and may this user connect?): \(why)")
        }
        return (store, pool)
    }

    /// Runs `body` with the store open. Root may do this to the system unit's state directory,
    /// the relay running or not: the database stays the relay's own (`StateOwnership`).
    func withStore<T>(_ body: (any RelayStore) async throws -> T) async throws -> T {
        if try databaseURL() == nil { StateOwnership.prepareDatabase(in: stateDirectory) }
        let (store, pool) = try await openStore()
        defer { pool.cancel() }
        return try await body(store)
    }
}

extension BGRelay {
    struct Serve: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "serve",
            abstract: "Run a relay node (the default).")
        @OptionGroup var options: RelayOptions

        @Option(help: "The address providers connect to.") var host = "127.0.0.1"
        @Option(help: "The providers' port (APNs provider API).") var port = 2197
        @Option(help: "The address devices connect to (default: --host).") var uplinkHost: String?
        @Option(help: "The devices' port (the uplink).") var uplinkPort = 2198
        @Option(help: "TLS certificate chain (PEM) for both ports; default: a self-signed pair made in --state-dir.")
        var certificate: String?
        @Option(help: "The certificate's private key (PEM).") var key: String?
        @Option(
            help:
                "A name (or address) providers and devices reach this relay by, e.g. relay.example.net; repeat for several. The self-signed certificate names each, besides localhost, the loopback addresses, this machine's host name and --host."
        )
        var certificateName: [String] = []
        @Option(help: "trace, debug, info, notice, warning, error or critical.") var logLevel = "notice"
        @Option(help: "This node's name among several (default: host:pid).") var node: String?
        @Option(
            help:
                "Pushes a second one device accepts, over all its tokens (bursts of 10 times that), before 429 TooManyRequests."
        )
        var deviceRate: Double = 20
        @Option(help: "Pushes a second one provider key may send to this node (bursts of 10 times that) before 429.")
        var providerRate: Double = 5_000
        @Option(help: "Device uplinks this node holds at most.") var maxDevices = 10_000
        @Option(help: "Device uplinks from one address (devices behind one NAT share it).")
        var maxDevicesPerAddress = 1_000
        @Option(
            help:
                "Enroll only devices that present this token (bgctl push relay enroll URL --enrollment-token TOKEN); default: anyone who reaches --uplink-port may enroll. At least 16 characters."
        )
        var enrollmentToken: String?
        @Option(
            help:
                "Read the enrollment token from this file's first line instead (kept out of ps and unit files; systemd's LoadCredential= puts one in $CREDENTIALS_DIRECTORY)."
        )
        var enrollmentTokenFile: String?
        @Option(help: "Device enrollments a second this node takes (bursts of 10 times that) before 429.")
        var enrollmentRate: Double = 10
        @Option(
            help:
                "A push waits this long for its device at most, whatever its apns-expiration, then ends as expired; a device enrolled this long ago that never connected is forgotten (default 30d).",
            transform: parseDuration)
        var holdPushes: Duration = .seconds(30 * 86400)
        @Option(
            help:
                "Ended pushes (delivered, expired, replaced, revoked) are deleted this long after they ended, and revoked tokens forgotten this long after their revocation (default 7d); checked hourly.",
            transform: parseDuration)
        var keepHistory: Duration = .seconds(7 * 86400)
        @Option(
            help:
                "A device not seen this long (no uplink to any node) is forgotten with its tokens and pushes; its bgd must enroll again (default 90d or --hold-pushes if longer; at least --hold-pushes).",
            transform: parseDuration)
        var forgetDevicesAfter: Duration?
        @Option(
            help:
                "An uplink whose device sends nothing, not even a keep-alive, this long is closed: a device gone without closing (wiped, its network dropped) holds no slot of --max-devices and counts as unseen. One whose device reads nothing this long (a write to it still waits) is cut. More than the devices' keep-alive interval (bgd's --push-relay-keep-alive, 270s by default, at most 10m) (default 15m).",
            transform: parseDuration)
        var uplinkSilence: Duration = .seconds(900)

        func validate() throws {
            if (certificate == nil) != (key == nil) { throw ValidationError("give --certificate and --key together") }
            guard (0...65535).contains(port), (0...65535).contains(uplinkPort) else {
                throw ValidationError("ports are 0 to 65535")
            }
            guard deviceRate > 0, providerRate > 0 else {
                throw ValidationError("--device-rate and --provider-rate must be positive")
            }
            guard maxDevices > 0, maxDevicesPerAddress > 0 else {
                throw ValidationError("--max-devices and --max-devices-per-address are at least 1")
            }
            guard enrollmentRate > 0 else { throw ValidationError("--enrollment-rate must be positive") }
            if enrollmentToken != nil, enrollmentTokenFile != nil {
                throw ValidationError("give --enrollment-token or --enrollment-token-file, not both")
            }
            if let token = try enrollmentTokenGiven(), token.count < 16 || token.contains(where: \.isWhitespace) {
                throw ValidationError(
                    "the enrollment token is at least 16 characters, no spaces (e.g. openssl rand -hex 16)")
            }
            guard holdPushes >= .seconds(60), keepHistory >= .seconds(60) else {
                throw ValidationError("--hold-pushes and --keep-history are at least 1m")
            }
            guard uplinkSilence >= .seconds(4) else {
                throw ValidationError("--uplink-silence is at least 4s (bgd's keep-alive is at most 10m)")
            }
            guard (forgetDevicesAfter ?? holdPushes) >= holdPushes else {
                throw ValidationError(
                    "--forget-devices-after is at least --hold-pushes: a device is not forgotten while a push may wait for it"
                )
            }
            guard Logger.Level(rawValue: logLevel) != nil else {
                throw ValidationError("--log-level is one of trace, debug, info, notice, warning, error, critical")
            }
        }

        /// --enrollment-token, or the first line of --enrollment-token-file.
        func enrollmentTokenGiven() throws -> String? {
            guard let enrollmentTokenFile else { return enrollmentToken }
            return try SecretFile.firstLine(of: enrollmentTokenFile, option: "--enrollment-token-file")
        }

        /// Gives the code pages back after 30 s without a request or an uplink round
        /// (`BGRELAY_CODE_PAGES_QUIET_SECONDS` for another period: tests use a short one), and
        /// says so at level info.
        static func codePages(_ clock: any WallClock, _ logger: Logger) -> IdleCodePages {
            let seconds = ProcessInfo.processInfo.environment["BGRELAY_CODE_PAGES_QUIET_SECONDS"].flatMap(Double.init)
            let times = Mutex(0)
            return IdleCodePages(clock: clock, quietPeriod: .seconds(seconds ?? 30), startingNow: false) {
                let bytes = IdleCodePages.releaseCodePages()
                let count = times.withLock {
                    $0 += 1
                    return $0
                }
                logger.info(
                    "Gave the code pages back", metadata: ["mapped.mb": "\(bytes >> 20)", "times": "\(count)"])
            }
        }

        func run() async throws {
            let level = Logger.Level(rawValue: logLevel) ?? .notice
            LoggingSystem.bootstrap { label in
                var handler = StreamLogHandler.standardError(label: label)
                handler.logLevel = level
                return handler
            }
            let logger = Logger(label: "bgrelay")
            let security: PushGatewayConfiguration.Security =
                if let certificate, let key { .files(certificate: certificate, key: key) } else { .selfSigned }
            let (store, pool) = try await options.openStore(logger: logger)
            defer { pool.cancel() }
            let clock: any WallClock = quietExecutor ? SystemClock.onEventLoops() : SystemClock()
            let codePages =
                IdleCodePages.isEnabled(unless: "BGRELAY_KEEP_CODE_PAGES") ? Self.codePages(clock, logger) : nil
            var provider = PushGatewayConfiguration(
                host: host, port: port, security: security,
                floodLimit: PushFloodLimit(perSecond: deviceRate, burst: deviceRate * 10))
            var uplink = PushGatewayConfiguration(
                host: uplinkHost ?? host, port: uplinkPort, security: security,
                connections: ConnectionLimits(perPeer: maxDevicesPerAddress, total: maxDevices))
            provider.certificateNames = certificateName
            uplink.certificateNames = certificateName
            var configuration = Relay.Configuration(
                provider: provider,
                uplink: uplink,
                stateDirectory: options.stateDirectory, node: node ?? Relay.Configuration.defaultNode,
                providerLimit: PushFloodLimit(perSecond: providerRate, burst: providerRate * 10),
                retention: Relay.Retention(
                    holdPending: holdPushes, keepEnded: keepHistory,
                    forgetDevices: forgetDevicesAfter ?? max(.seconds(90 * 86400), holdPushes)),
                enrollment: EnrollmentPolicy(
                    token: try enrollmentTokenGiven(),
                    limit: PushFloodLimit(perSecond: enrollmentRate, burst: enrollmentRate * 10)))
            configuration.uplinkSilence = uplinkSilence
            let relay = Relay(
                configuration: configuration, store: store, clock: clock, logger: logger,
                activity: { codePages?.noteActivity() })
            // A listener that cannot start stops the others gracefully, not by cancelling them
            // into errors of their own beside the one that says what went wrong.
            let services: [any Service]
            do {
                services = try relay.makeServices() + (codePages.map { [CodePagesWhenQuiet(pages: $0)] } ?? [])
            } catch where error is GatewayCertificate.MissingNames || error is GatewayCertificate.Damaged {
                FileHandle.standardError.write(Data("bgrelay: \(error)\n".utf8))
                throw ExitCode(78)  // EX_CONFIG
            }
            let group = ServiceGroup(
                configuration: .init(
                    services: services.map { .init(service: $0, failureTerminationBehavior: .gracefullyShutdownGroup) },
                    gracefulShutdownSignals: quietExecutor ? [] : [.sigterm, .sigint],
                    logger: logger))
            if quietExecutor { SignalWaiter.shared.onSignal { Task { await group.triggerGracefulShutdown() } } }
            Task {
                let providers = try await relay.providerPort.listening()
                let devices = try await relay.uplinkPort.listening()
                // One line on standard output once both listen: scripts and tests wait for it.
                FileHandle.standardOutput.write(
                    Data(
                        "bgrelay: providers on \(host):\(providers), devices on \(uplinkHost ?? host):\(devices)\n".utf8
                    ))
                codePages?.noteActivity()  // started: the first quiet period starts now
            }
            do {
                try await group.run()
            } catch let error as ListenerFailed {
                FileHandle.standardError.write(Data("bgrelay: \(error)\n".utf8))
                throw ExitCode(69)  // EX_UNAVAILABLE
            } catch let error as UnusableCertificatePair {
                FileHandle.standardError.write(Data("bgrelay: \(error)\n".utf8))
                throw ExitCode(78)  // EX_CONFIG
            }
        }
    }

    struct SystemdUnit: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "systemd-unit",
            abstract: "Print a systemd system unit that runs this bgrelay as a service.",
            discussion: """
                bgrelay systemd-unit -- --host 0.0.0.0 | sudo tee /etc/systemd/system/bgrelay.service
                sudo systemctl daemon-reload && sudo systemctl enable --now bgrelay
                Everything after -- is passed to bgrelay serve (checked here first). The service runs \
                as a user systemd makes for it, its state in /var/lib/bgrelay.
                """)
        @Option(
            help:
                "A file holding the enrollment token (root's to read): systemd hands it to the service (LoadCredential=), so it is in neither the unit nor ps."
        )
        var enrollmentTokenFile: String?
        @Option(
            help:
                "A file holding the PostgreSQL URL, password and all (root's to read): handed to the service as the token is."
        )
        var databaseFile: String?
        @Argument(parsing: .postTerminator, help: "bgrelay serve's options for the service.")
        var serveArguments: [String] = []

        func validate() throws {
            if serveArguments.contains(where: { $0.hasPrefix("--enrollment-token") }) {
                throw ValidationError(
                    "give the token as a file before --: bgrelay systemd-unit --enrollment-token-file PATH -- …")
            }
            if let enrollmentTokenFile, !enrollmentTokenFile.hasPrefix("/") {
                throw ValidationError("--enrollment-token-file is an absolute path (systemd reads it, from anywhere)")
            }
            if let databaseFile, !databaseFile.hasPrefix("/") {
                throw ValidationError("--database-file is an absolute path (systemd reads it, from anywhere)")
            }
            if serveArguments.contains(where: { $0.hasPrefix("--database-file") }) {
                throw ValidationError("give the URL's file before --: bgrelay systemd-unit --database-file PATH -- …")
            }
            // A unit in /etc/systemd/system is anyone's to read, and ExecStart is in ps.
            if let url = try? Serve.parse(serveArguments).options.database, URLComponents(string: url)?.password != nil
            {
                throw ValidationError(
                    "--database's password would be in the unit (anyone may read it) and in ps: put the URL in a file only root may read and give it before --: bgrelay systemd-unit --database-file PATH -- …"
                )
            }
            if serveArguments.contains(where: { $0.contains(where: \.isNewline) }) {
                throw ValidationError("an option with a line break cannot go in a unit's ExecStart=")
            }
            // The service's user (one systemd makes) cannot reach into a home directory, and
            // ProtectHome= hides them: a bgrelay installed under one would not start.
            let executable = Self.executable
            if ["/home/", "/root/", "/run/user/"].contains(where: executable.hasPrefix) {
                throw ValidationError(
                    "\(executable) is in a home directory, where a system service cannot run it; install it elsewhere first: sudo PREFIX=/usr/local Scripts/install.sh"
                )
            }
            do {
                _ = try Serve.parse(serveArguments)
            } catch {
                throw ValidationError("bgrelay serve would refuse these options: \(Serve.message(for: error))")
            }
            if serveArguments.contains(where: { $0 == "--state-dir" || $0.hasPrefix("--state-dir=") }) {
                throw ValidationError(
                    "the service keeps its state in /var/lib/bgrelay (systemd's StateDirectory=); leave out --state-dir"
                )
            }
        }

        /// This very binary, however it was started (argv[0] is only "bgrelay" when found on PATH).
        static var executable: String {
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
                ?? URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().path
        }

        func run() throws {
            let executable = Self.executable
            var arguments = (["serve", "--state-dir", "/var/lib/bgrelay"] + serveArguments).map(SystemdWord.quoted)
            var credential = ""
            // Not quoted: systemd puts the credentials' directory in place of the variable.
            if let enrollmentTokenFile {
                credential += "LoadCredential=enrollment-token:\(SystemdWord.escapingSpecifiers(enrollmentTokenFile))\n"
                arguments += ["--enrollment-token-file", "${CREDENTIALS_DIRECTORY}/enrollment-token"]
            }
            if let databaseFile {
                credential += "LoadCredential=database:\(SystemdWord.escapingSpecifiers(databaseFile))\n"
                arguments += ["--database-file", "${CREDENTIALS_DIRECTORY}/database"]
            }
            print(
                """
                [Unit]
                Description=swift-background push relay (bgrelay): the APNs provider API for providers, an uplink for devices
                Documentation=man:bgrelay(1)
                After=network-online.target
                Wants=network-online.target

                [Service]
                ExecStart=\(SystemdWord.quoted(executable)) \(arguments.joined(separator: " "))
                \(credential)DynamicUser=yes
                StateDirectory=bgrelay
                StateDirectoryMode=0700
                Restart=on-failure
                RestartSec=2
                # A usage error (64) or a certificate to fix (78) is not mended by starting again.
                RestartPreventExitStatus=64 78
                # bgrelay stops cleanly on SIGTERM: it tells its devices to reconnect elsewhere.
                TimeoutStopSec=20
                # One descriptor per connected device.
                LimitNOFILE=65536
                NoNewPrivileges=yes
                ProtectSystem=strict
                ProtectHome=yes
                PrivateTmp=yes
                PrivateDevices=yes
                RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX

                [Install]
                WantedBy=multi-user.target
                """)
        }

    }

    struct Keys: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "keys",
            abstract: "Provider keys (ES256, .p8) whose tokens the relay accepts.",
            subcommands: [List.self, Add.self, Remove.self], defaultSubcommand: List.self)

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(commandName: "list", abstract: "List the registered keys.")
            @OptionGroup var options: RelayOptions

            func run() async throws {
                let keys = try await options.withStore { try await $0.providerKeys() }
                guard !keys.isEmpty else {
                    return print(
                        "No provider keys. Add one with: bgrelay keys add --key-id … --team-id … --topics APP KEY.p8")
                }
                for key in keys { print("\(key.keyID)  team \(key.teamID)  \(key.topics.joined(separator: ","))") }
            }
        }

        struct Add: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "add",
                abstract:
                    "Register a provider key: only its public half is kept; a running relay sees it within a second.")
            @OptionGroup var options: RelayOptions
            @OptionGroup var key: ProviderKeyArguments

            func run() async throws {
                let registration = try key.registration()
                try await options.withStore { try await $0.addProviderKey(registration, now: SystemClock().now) }
                print(
                    "Provider key \(registration.keyID) (team \(registration.teamID)) may push to \(registration.topics.joined(separator: ", "))."
                )
            }
        }

        struct Remove: AsyncParsableCommand {
            static let configuration = CommandConfiguration(commandName: "remove", abstract: "Forget a provider key.")
            @OptionGroup var options: RelayOptions
            @Argument(help: "The key's id.") var keyID: String

            func run() async throws {
                guard try await options.withStore({ try await $0.removeProviderKey(keyID) }) else {
                    FileHandle.standardError.write(
                        Data("bgrelay: no provider key \(keyID); bgrelay keys lists them\n".utf8))
                    throw ExitCode(3)  // as bgctl's "no such key"
                }
                print("Removed provider key \(keyID).")
            }
        }
    }
}

/// "30s", "15m", "2h", "7d": a duration.
func parseDuration(_ text: String) throws -> Duration {
    guard let duration = Duration(parsingHuman: text) else {
        throw ValidationError("'\(text)' is not a duration; write it like 30s, 15m, 2h or 7d")
    }
    return duration
}

/// A secret handed over in a file (`--enrollment-token-file`, `--database-file`), so that it is in
/// neither `ps` nor a unit: its first line, trimmed.
enum SecretFile {
    static func firstLine(of path: String, option: String) throws -> String {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ValidationError("cannot read \(option) \(path): \(SystemErrorText.describe(error))")
        }
        return String(text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).first ?? "")
            .trimmingCharacters(in: .whitespaces)
    }
}
