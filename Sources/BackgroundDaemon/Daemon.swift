import BackgroundGateway
import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import QuietThreads
import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// bgd: the composition root. Takes the state directory, opens the store, closes the runs a
/// previous bgd left in flight, and runs the API, the run coordinator and the scheduler.
public struct Daemon: Service {
    public static let version = "0.1.0"

    public struct Configuration: Sendable {
        public var stateDirectory: String
        public var socketPath: String
        public var durability: BackgroundStore.Durability
        public var budget: RunBudget
        public var lingerGrace: Duration
        public var fetchPolicy: FetchPolicy.Configuration
        /// How apps' habits are learnt and turned into wakes.
        public var usage: UsageTracker.Configuration
        /// Where the machine's power and network are read from.
        public var conditions: ConditionsMonitor.Configuration
        /// How background transfers are carried.
        public var transfers: TransferService.Configuration
        /// The APNs-compatible push gateway; nil: not started.
        public var push: PushGatewayConfiguration?
        /// The push relay bgd connects out to (`--push-relay`), for providers that cannot reach
        /// this machine; bgd also connects to one enrolled with `bgctl push relay enroll`.
        public var pushRelay: PushUplink.Configuration
        /// Background time after leaving the foreground (`beginBackgroundTask`), and suspension.
        public var backgroundTime: BackgroundTimePolicy
        /// How long `BGProcessingTaskRequest`s may run.
        public var processing: ProcessingTaskPolicy
        /// The dashboard and `/metrics` on TCP; nil: off (the default).
        public var dashboard: DashboardServer.Configuration?
        /// Confine launched apps to their container where the kernel can (Landlock).
        public var confineApps: Bool
        /// Hold apps in cgroups of their own where bgd may make them (else signals).
        public var appCgroups: Bool
        /// What finished work is kept, and how often the rest is pruned.
        public var retention: HistoryPruner.Configuration
        /// The listening socket systemd passed (socket activation): served instead of binding
        /// `socketPath`, which is then its path.
        public var activatedSocket: ActivatedSocket?
        /// Unmap the code pages a burst of work touched once bgd has been quiet (`IdleCodePages`):
        /// bgd's own process does; tests, in the test runner's, do not.
        public var releasesIdleCodePages: Bool

        public init(
            stateDirectory: String, socketPath: String, durability: BackgroundStore.Durability = .full,
            budget: RunBudget = RunBudget(), lingerGrace: Duration = .seconds(5),
            fetchPolicy: FetchPolicy.Configuration = .init(), usage: UsageTracker.Configuration = .init(),
            conditions: ConditionsMonitor.Configuration = .init(), transfers: TransferService.Configuration = .init(),
            push: PushGatewayConfiguration? = nil, backgroundTime: BackgroundTimePolicy = BackgroundTimePolicy(),
            processing: ProcessingTaskPolicy = ProcessingTaskPolicy(), dashboard: DashboardServer.Configuration? = nil,
            confineApps: Bool = true, appCgroups: Bool = true, retention: HistoryPruner.Configuration = .init(),
            activatedSocket: ActivatedSocket? = nil, releasesIdleCodePages: Bool = false,
            pushRelay: PushUplink.Configuration = .init()
        ) {
            self.pushRelay = pushRelay
            self.releasesIdleCodePages = releasesIdleCodePages
            self.activatedSocket = activatedSocket
            self.retention = retention
            self.appCgroups = appCgroups
            self.confineApps = confineApps
            self.dashboard = dashboard
            self.backgroundTime = backgroundTime
            self.processing = processing
            self.push = push
            self.transfers = transfers
            self.usage = usage
            self.conditions = conditions
            self.stateDirectory = stateDirectory
            self.socketPath = activatedSocket?.path ?? socketPath
            self.durability = durability
            self.budget = budget
            self.lingerGrace = lingerGrace
            self.fetchPolicy = fetchPolicy
        }
    }

    public let configuration: Configuration
    public let store: BackgroundStore
    public let activity: ActivityFeed
    public let clock: any WallClock
    private let stateDirectory: StateDirectory
    private let coordinator: RunCoordinator
    let scheduler: Scheduler
    private let keepAlive: KeepAlive
    /// Rung by `bgctl` to prune now (tests, the soak benchmark), and after every 10 × an app's
    /// kept pushes stored (`PruneAfterPushes`).
    public let pruneDoorbell = Doorbell()
    private let pruner: HistoryPruner
    private let conditionsPoller: ConditionsMonitor.Poller?
    private let transfers: TransferService
    package var transferService: TransferService { transfers }
    /// The push gateway, when configured.
    public let pushGateway: PushGateway<StorePushDestinations>?
    private let pushDispatcher: PushDispatcher
    /// The uplink to a push relay: idle until one is enrolled.
    public let pushUplink: PushUplink
    /// Apps' lifecycles and finite-length background tasks.
    public let lifecycle: LifecycleSupervisor
    /// The counters behind `/metrics`.
    public let metrics: DaemonMetrics
    /// The dashboard, when configured.
    public let dashboard: DashboardServer?
    let taskDispatcher: TaskDispatcher
    /// The `/v1/` API's use cases and routes, wired once.
    private let api: DaemonAPI
    /// The apps' outboxes and streams (tests open a stream without a socket).
    var appEvents: AppEvents { api.events }

    /// The `/v1/` API as bgd serves it on its socket: errors in the API's JSON shape, the
    /// operator's gate, every route. Tests drive it without a socket (`app.test(.router)`).
    public func apiRouter() -> Router<APIRequestContext> {
        let router = Router(context: APIRequestContext.self)
        router.middlewares.add(APIErrorMiddleware())
        api.add(to: router)
        return router
    }
    private let logger: Logger
    /// The control socket's path, ours from start to stop.
    private let socketClaim: SocketClaim
    /// What `bgctl` proves it is the operator with.
    public let operatorCredential: OperatorCredential
    /// How the apps bgd launches are confined.
    public let confinement: Confinement.Mode
    /// Every app process bgd launched or was told about.
    public let supervisor: ProcessSupervisor

    /// Takes the state directory (throws `StateDirectory.AlreadyInUse` when another bgd holds
    /// it), opens the store and reconciles what a previous bgd left behind.
    public init(
        configuration: Configuration, clock: any WallClock = SystemClock(), launcher: (any AppLauncher)? = nil,
        logger: Logger = Logger(label: "bg.daemon")
    ) async throws {
        self.configuration = configuration
        self.clock = clock
        self.logger = logger
        stateDirectory = try StateDirectory(path: configuration.stateDirectory)
        socketClaim = try SocketClaim(configuration.socketPath, activated: configuration.activatedSocket != nil)
        let helper: String?
        (confinement, helper) = Self.confinement(configuration, logger: logger)
        operatorCredential = try OperatorCredential(socketPath: configuration.socketPath)
        let metrics = DaemonMetrics()
        self.metrics = metrics
        store = try BackgroundStore.open(
            atPath: stateDirectory.databasePath, durability: configuration.durability,
            onCommit: { metrics.recordCommit($0) })
        activity = ActivityFeed()

        let processMode = Self.processMode(configuration, stateDirectory: stateDirectory, logger: logger)
        supervisor = ProcessSupervisor(
            mode: processMode, launcher: launcher ?? ProcessLauncher(helper: Confinement.helperPath()), clock: clock,
            killGrace: configuration.budget.killGrace, logger: Self.logger("bg.processes", like: logger))

        try await Self.settleWhatAPreviousBgdLeft(
            store: store, socketPath: configuration.socketPath, clock: clock, logger: logger)
        try await Self.removeFilesOfEndedTransfers(store: store, stateDirectory: stateDirectory, logger: logger)
        _ = try await TokenFile.settleStaged(store: store, stateDirectory: stateDirectory, logger: logger)
        let usage = UsageTracker(store: store, configuration: configuration.usage)
        try await usage.rebuild(now: clock.now)
        let fetchPolicy = FetchPolicy(configuration: configuration.fetchPolicy)
        let broker = EventBroker()
        let tokens = TokenIssuer()
        let doorbell = Doorbell()
        let transferDoorbell = Doorbell()
        // The network came back or changed: the relay uplink checks itself or reconnects now.
        let networkDoorbell = Doorbell()
        let pushDoorbell = Doorbell()
        let taskDoorbell = Doorbell()
        let conditions = try await ConditionsMonitor(
            configuration: configuration.conditions, store: store,
            doorbells: [doorbell, transferDoorbell, taskDoorbell], networkDoorbells: [networkDoorbell],
            logger: Self.logger("bg.conditions", like: logger))
        if case .sysfs = configuration.conditions.sensing {
            conditionsPoller = ConditionsMonitor.Poller(
                monitor: conditions, clock: clock, configuration: configuration.conditions,
                logger: Self.logger("bg.conditions", like: logger))
        } else {
            conditionsPoller = nil
        }
        lifecycle = LifecycleSupervisor(
            policy: configuration.backgroundTime, store: store, broker: broker, activity: activity, clock: clock,
            supervisor: supervisor,
            killGrace: configuration.budget.killGrace,
            foregroundDoorbells: [taskDoorbell], logger: Self.logger("bg.lifecycle", like: logger))
        coordinator = RunCoordinator(
            store: store, stateDirectory: stateDirectory, broker: broker, supervisor: supervisor, tokens: tokens,
            activity: activity, clock: clock,
            configuration: .init(
                budget: configuration.budget, processingBudget: configuration.processing.budget,
                lingerGrace: configuration.lingerGrace,
                socketPath: configuration.socketPath,
                confineApps: configuration.confineApps && helper != nil),
            schedulerDoorbell: doorbell, runEndedDoorbells: [pushDoorbell, taskDoorbell], lifecycle: lifecycle,
            logger: Self.logger("bg.runs", like: logger))
        taskDispatcher = TaskDispatcher(
            store: store, coordinator: coordinator, lifecycle: lifecycle, conditions: conditions,
            policy: configuration.processing, clock: clock,
            doorbell: taskDoorbell, logger: Self.logger("bg.tasks", like: logger))
        scheduler = Scheduler(
            metrics: metrics, store: store, coordinator: coordinator, policy: fetchPolicy, usage: usage,
            conditions: conditions, clock: clock, doorbell: doorbell,
            activity: activity, logger: Self.logger("bg.scheduler", like: logger))
        keepAlive = KeepAlive(broker: broker, clock: clock)
        let pruneAfterPushes = PruneAfterPushes(
            threshold: 10 * configuration.retention.retention.pushesKeptPerApp, pruner: pruneDoorbell)
        if let push = configuration.push {
            pushGateway = PushGateway(
                configuration: push,
                intake: PushIntake(
                    destinations: StorePushDestinations(store: store, stored: pruneAfterPushes.stored),
                    clock: clock, floodLimit: push.floodLimit,
                    committed: { [pushDoorbell] in pushDoorbell.ring() },
                    answered: { [metrics] in metrics.recordPushRequest(status: $0) }),
                certificateDirectory: stateDirectory.path, clock: clock, logger: Self.logger("bg.push", like: logger))
        } else {
            pushGateway = nil
        }
        // Pushes come from the gateway, the relay's uplink, or both.
        pushDispatcher = PushDispatcher(
            store: store, coordinator: coordinator, throttle: configuration.push?.throttle ?? PushThrottle(),
            clock: clock, doorbell: pushDoorbell,
            activity: activity, logger: Self.logger("bg.push", like: logger))
        pushUplink = PushUplink(
            configuration: configuration.pushRelay, store: store, stateDirectory: stateDirectory.path, clock: clock,
            pushes: pushDoorbell, network: networkDoorbell, stored: pruneAfterPushes.stored,
            logger: Self.logger("bg.push", like: logger))
        transfers = TransferService(
            store: store, stateDirectory: stateDirectory, coordinator: coordinator, broker: broker,
            conditions: conditions,
            activity: activity, clock: clock, configuration: configuration.transfers,
            lowBatteryLevel: configuration.fetchPolicy.lowBatteryLevel, doorbell: transferDoorbell,
            logger: Self.logger("bg.transfers", like: logger))
        pruner = HistoryPruner(
            store: store, configuration: configuration.retention, clock: clock, doorbell: pruneDoorbell,
            activity: activity,
            eventsExpired: { [coordinator] app, openRemaining in
                await coordinator.eventsExpired(for: app, openRemaining: openRemaining)
            },
            expirePaused: { [transfers] in try await transfers.expireIfStillPaused($0) },
            logger: Self.logger("bg.retention", like: logger))
        var api = DaemonAPI(
            DaemonAPI.Engines(
                store: store, stateDirectory: stateDirectory, broker: broker, tokens: tokens, lifecycle: lifecycle,
                coordinator: coordinator, supervisor: supervisor, usage: usage, conditions: conditions,
                fetchPolicy: fetchPolicy, transfers: transfers, taskDispatcher: taskDispatcher, metrics: metrics,
                activity: activity, clock: clock, operatorCredential: operatorCredential,
                schedulerDoorbell: doorbell, taskDoorbell: taskDoorbell, pushUplink: pushUplink, logger: logger),
            status: (
                configuration.socketPath, "\(confinement)", "\(processMode)",
                pushGateway.map { gateway in (gateway.baseURL, gateway.boundPort) }
            ))
        if let settings = configuration.dashboard {
            let server = DashboardServer(
                configuration: settings, views: api.dashboardViews(), metrics: metrics, store: store, clock: clock,
                auth: try DashboardAuth(stateDirectory: stateDirectory.path),
                logger: Self.logger("bg.dashboard", like: logger))
            dashboard = server
            api.serveDashboard(server.access)
        } else {
            dashboard = nil
        }
        self.api = api
        // Who hears of a process that ended: the runs of one bgd launched; of one the user started,
        // the runs given to it and its lifecycle.
        let coordinator = self.coordinator, lifecycle = self.lifecycle
        // Weakly: the supervisor outlives neither, and a cycle would keep the state directory locked.
        await supervisor.onExit { [weak coordinator, weak lifecycle] exit in
            if exit.launched {
                await coordinator?.processExited(exit)
            } else {
                await coordinator?.runningAppExited(exit)
                await lifecycle?.processExited(exit.processID, of: exit.app)
            }
        }
    }

    /// Serves until cancelled or shut down gracefully. `onReady` runs once the socket accepts
    /// connections.
    public func run(onReady: @escaping @Sendable () async -> Void) async throws {
        defer {
            socketClaim.release()
            stateDirectory.releaseLock()
        }
        let router = apiRouter()
        let socketPath = configuration.socketPath
        let logger = self.logger
        let listeners = [pushGateway?.boundPort, dashboard?.boundPort].compactMap { $0 }
        let application = QuietApplication(
            responder: router.buildResponder(),
            configuration: .init(address: .unixDomainSocket(path: socketPath), serverName: "bgd/\(Self.version)"),
            services: [
                supervisor, coordinator, scheduler, keepAlive, transfers, lifecycle, taskDispatcher, pruner,
                MetricsRecorder(metrics: metrics, activity: activity),
            ]
                + (configuration.releasesIdleCodePages
                    ? [QuietCodePages(pages: IdleCodePages(clock: clock), activity: activity)] : [])
                + (conditionsPoller.map { [$0] } ?? [])
                + (pushGateway.map { [$0] } ?? []) + [pushDispatcher, pushUplink]
                + (dashboard.map { [$0] } ?? [])
                + (SystemdWatchdog.interval().map {
                    [SystemdWatchdog(interval: $0, store: store, logger: Self.logger("bg.daemon", like: logger))]
                } ?? []),
            onServerRunning: { [activated = configuration.activatedSocket] _ in
                // systemd's socket has the mode its unit gives (SocketMode=0600).
                if activated == nil { chmod(socketPath, 0o600) }
                // Ready means every listener is up: a gateway or dashboard port in use is said
                // (naming its flag) before "ready", and bgd then stops with that error.
                for port in listeners {
                    do { _ = try await port.listening() } catch { return }
                }
                logger.notice(
                    "bgd is ready",
                    metadata: ["socket": "\(socketPath)"].merging(
                        activated == nil ? [:] : ["activation": "systemd socket"], uniquingKeysWith: { a, _ in a }))
                let apps = (try? await store.appCount()).map { "\($0) apps; " } ?? ""
                SystemdNotify.send("READY=1\nSTATUS=\(apps)serving on \(socketPath)")
                await onReady()
            },
            logger: Self.logger("bg.api", like: logger), activated: configuration.activatedSocket)
        // systemd shows "deactivating" at once, not when the grace periods have run out.
        try await withGracefulShutdownHandler {
            try await application.run()
        } onGracefulShutdown: {
            SystemdNotify.send("STOPPING=1\nSTATUS=stopping: apps get their expiration handlers and the kill grace")
        }
    }

    public func run() async throws { try await run(onReady: {}) }

    /// A logger for one area, at the level the daemon's logger was given.
    private static func logger(_ label: String, like parent: Logger) -> Logger {
        var logger = Logger(label: label)
        logger.logLevel = parent.logLevel
        return logger
    }
}

extension Daemon: CustomStringConvertible {
    /// ServiceLifecycle logs its services at debug level: a name, not every field of every part.
    public var description: String { "Daemon(\(configuration.stateDirectory))" }
}
