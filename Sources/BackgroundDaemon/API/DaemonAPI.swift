import BackgroundGateway
import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Hummingbird
import Logging

/// The `/v1/` API, wired once from the daemon's engines: the use-case services, then the route
/// adapters over them. The dashboard's views read the same services.
struct DaemonAPI: Sendable {
    /// What the use cases are made of: the daemon's engines and shared parts, handed over once
    /// by `Daemon` (the composition root) and kept by no route.
    struct Engines {
        var store: BackgroundStore
        var stateDirectory: StateDirectory
        var broker: EventBroker
        var tokens: TokenIssuer
        var lifecycle: LifecycleSupervisor
        var coordinator: RunCoordinator
        var supervisor: ProcessSupervisor
        var usage: UsageTracker
        var conditions: ConditionsMonitor
        var fetchPolicy: FetchPolicy
        var transfers: TransferService
        var taskDispatcher: TaskDispatcher
        var metrics: DaemonMetrics
        var activity: ActivityFeed
        var clock: any WallClock
        var operatorCredential: OperatorCredential
        var schedulerDoorbell: Doorbell
        var taskDoorbell: Doorbell
        var pushUplink: PushUplink
        var logger: Logger
    }

    let apps: Apps
    let runs: Runs
    let pushes: Pushes
    let transfers: Transfers
    let events: AppEvents
    let tasks: TaskRequests
    let info: DaemonInfo
    private let engines: Engines
    /// The dashboard, once bgd serves one (`bgctl dashboard` asks it for a login link).
    private var dashboard: DashboardAccess?

    init(
        _ engines: Engines,
        status: (socketPath: String, confinement: String, processes: String, pushGateway: (base: String, port: BoundPort)?)
    ) {
        self.engines = engines
        let e = engines
        let waiter = ActivityWaiter(activity: e.activity, clock: e.clock)
        apps = Apps(
            store: e.store, stateDirectory: e.stateDirectory, broker: e.broker, tokens: e.tokens,
            lifecycle: e.lifecycle, coordinator: e.coordinator, usage: e.usage, activity: e.activity,
            clock: e.clock, schedulerDoorbell: e.schedulerDoorbell, logger: e.logger)
        runs = Runs(
            store: e.store, apps: apps, coordinator: e.coordinator, usage: e.usage, conditions: e.conditions,
            fetchPolicy: e.fetchPolicy, waiter: waiter, clock: e.clock)
        pushes = Pushes(store: e.store, apps: apps, clock: e.clock, uplink: e.pushUplink)
        transfers = Transfers(service: e.transfers, store: e.store, apps: apps, waiter: waiter)
        events = AppEvents(
            store: e.store, apps: apps, broker: e.broker, coordinator: e.coordinator, lifecycle: e.lifecycle,
            activity: e.activity, clock: e.clock)
        tasks = TaskRequests(
            store: e.store, apps: apps, coordinator: e.coordinator, lifecycle: e.lifecycle,
            dispatcher: e.taskDispatcher, clock: e.clock, taskDoorbell: e.taskDoorbell,
            schedulerDoorbell: e.schedulerDoorbell)
        info = DaemonInfo(
            store: e.store, runs: runs, clock: e.clock, stateDirectory: e.stateDirectory.path,
            socketPath: status.socketPath, startedAt: e.clock.now, appConfinement: status.confinement,
            appProcesses: status.processes, pushGateway: status.pushGateway)
    }

    /// The dashboard's views, over the same read models.
    func dashboardViews() -> DashboardViews {
        DashboardViews(
            apps: apps, runs: runs, pushes: pushes, transfers: transfers, activity: engines.activity,
            clock: engines.clock, recent: RecentActivity(activity: engines.activity, clock: engines.clock), info: info,
            store: engines.store)
    }

    mutating func serveDashboard(_ access: DashboardAccess?) { dashboard = access }

    /// Every route and its middleware: the operator's gate, then the operator's routes, then
    /// `/v1/app` behind one authentication.
    func add(to router: Router<APIRequestContext>) {
        let e = engines
        let supervisor = e.supervisor
        router.middlewares.add(
            OperatorGate(
                credential: e.operatorCredential, tokens: e.tokens, store: e.store,
                launchedApp: { await supervisor.launchedApp(containing: $0) }))
        AdminRoutes(
            info: info, apps: apps, runs: runs, events: events, conditions: e.conditions, metrics: e.metrics,
            store: e.store, dashboard: dashboard, clock: e.clock
        ).add(to: router)
        let appGroup = router.group("v1/app").add(middleware: AppAuthentication(tokens: e.tokens, store: e.store))
        AppRoutes(apps: apps, runs: runs, events: events, coordinator: e.coordinator).add(to: appGroup)
        TransferRoutes(transfers: transfers).add(to: router, appGroup: appGroup)
        PushRoutes(pushes: pushes).add(to: router, appGroup: appGroup)
        LifecycleRoutes(lifecycle: e.lifecycle, tasks: tasks).add(to: router, appGroup: appGroup)
    }
}
