import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Logging
import Synchronization

/// The parts of a running bgd that the API needs, wired once by `Daemon`.
struct DaemonCore: Sendable {
    var store: BackgroundStore
    var stateDirectory: StateDirectory
    var coordinator: RunCoordinator
    var broker: EventBroker
    var tokens: TokenIssuer
    var activity: ActivityFeed
    var clock: any WallClock
    var schedulerDoorbell: Doorbell
    /// Rung when task requests change.
    var taskDoorbell: Doorbell
    var lifecycle: LifecycleSupervisor
    var tasks: TaskDispatcher
    /// How long a processing task may run.
    var processingBudget: Duration
    var metrics: DaemonMetrics
    /// The dashboard, when bgd serves one (`bgctl dashboard` asks it for a login link).
    var dashboard: DashboardAccess?
    var usage: UsageTracker
    var conditions: ConditionsMonitor
    var transfers: TransferService
    var fetchPolicy: FetchPolicy
    var socketPath: String
    /// The last app listing, encoded, with what it was read at.
    let listingCache = ListingCache()
    /// How launched apps are confined, as `bgctl status` says it.
    var appConfinement: String
    /// How app processes are held (cgroups or signals, and why).
    var appProcesses: String
    var startedAt: Date
    var logger: Logger

    /// An app as the API shows it.
    func summary(of app: StoredApp) async throws -> AppSummary {
        let plan = try await store.savedPlan(for: app.id)
        return AppSummary(
            id: app.id, launchCommand: app.launchCommand, fetchInterval: app.fetchInterval,
            registeredAt: app.registeredAt, isConnected: broker.isConnected(app.id),
            lastRun: try await store.runs(of: app.id, limit: 1).first, nextWake: plan?.decision.dueAt,
            nextWakeReasons: plan?.decision.reasons ?? [], containerPath: stateDirectory.containerPath(for: app.id),
            lifecycle: await lifecycle.status(of: app.id), taskIdentifiers: app.taskIdentifiers)
    }

    /// Every app as the API shows it: three statements and one look at the lifecycles, whatever
    /// the number of apps.
    func summaries() async throws -> [AppSummary] {
        let listing = try await store.appListing()
        let lifecycles = await lifecycle.statusesByApp().statuses
        return listing.map { entry in
            let app = entry.app
            return AppSummary(
                id: app.id, launchCommand: app.launchCommand, fetchInterval: app.fetchInterval,
                registeredAt: app.registeredAt, isConnected: broker.isConnected(app.id), lastRun: entry.lastRun,
                nextWake: entry.plan?.decision.dueAt, nextWakeReasons: entry.plan?.decision.reasons ?? [],
                containerPath: stateDirectory.containerPath(for: app.id), lifecycle: lifecycles[app.id],
                taskIdentifiers: app.taskIdentifiers)
        }
    }

    /// `GET /v1/apps` as JSON: encoded once, then served as is until the store commits, a stream
    /// opens or closes, or a lifecycle changes — a hundred clients asking at once cost one encoding.
    func encodedSummaries() async throws -> Data {
        // The key is read before the data: a change that lands meanwhile makes the key stale,
        // never the data newer than its key.
        let key = ListingCache.Key(
            commits: store.commits.current, connections: broker.connectionGeneration,
            lifecycles: await lifecycle.statusVersion)
        let core = self
        return try await listingCache.data(for: key) { try WireCoding.makeEncoder().encode(try await core.summaries()) }
    }

    /// The user opened the app: the store remembers, the learner learns, the scheduler replans
    /// (the user being active changes the chances of the other apps too).
    func recordOpen(of app: AppID) async throws {
        let now = clock.now
        try await store.recordOpen(of: app, at: now)
        await usage.recordOpen(of: app, at: now)
        schedulerDoorbell.ring()
    }

    func requireApp(_ id: AppID) async throws -> StoredApp {
        guard let app = try await store.app(id) else { throw APIError.unknownApp(id) }
        return app
    }

    /// Waits until the run has ended or `timeout` has passed on the daemon's clock; returns the
    /// run as it then stands.
    func waitForEnd(of id: RunID, timeout: Duration) async throws -> RunRecord {
        let feed = activity.subscribe()  // before reading the store, so the end cannot slip between
        guard let current = try await store.run(id) else { throw StoreError.runNotFound(id) }
        if current.outcome != nil || timeout <= .zero { return current }
        let ended = try await firstActivity(in: feed, within: timeout) { activity -> RunRecord? in
            if case .runEnded(let run) = activity, run.id == id { return run }
            return nil
        }
        if let ended { return ended }
        return try await store.run(id) ?? current
    }

    /// The first activity in `feed` that `match` accepts, or nil once `timeout` has passed on the
    /// daemon's clock.
    func firstActivity<T: Sendable>(
        in feed: AsyncStream<Activity>, within timeout: Duration, _ match: @escaping @Sendable (Activity) -> T?
    ) async throws -> T? {
        let deadline = clock.now.adding(timeout)
        let clock = self.clock
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                for await activity in feed {
                    if let found = match(activity) { return found }
                }
                return nil
            }
            group.addTask {
                try await clock.sleep(until: deadline)
                return nil
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
    }
}

/// One encoded app listing and the versions of what it was made from. Requests that find it
/// being made for their key wait for that one instead of making their own (a hundred clients
/// arriving together after a change cost one encoding, not a hundred).
final class ListingCache: Sendable {
    struct Key: Equatable {
        var commits: Int
        var connections: Int
        var lifecycles: Int
    }
    private struct State {
        var kept: (key: Key, data: Data)?
        var making: (key: Key, task: Task<Data, any Error>)?
    }
    private let state = Mutex(State())

    func data(for key: Key, make: @escaping @Sendable () async throws -> Data) async throws -> Data {
        enum Found {
            case kept(Data)
            case making(Task<Data, any Error>)
        }
        let found = state.withLock { state -> Found in
            if let kept = state.kept, kept.key == key { return .kept(kept.data) }
            if let making = state.making, making.key == key { return .making(making.task) }
            let task = Task { try await make() }
            state.making = (key, task)
            return .making(task)
        }
        switch found {
        case .kept(let data): return data
        case .making(let task):
            do {
                let data = try await task.value
                state.withLock { state in
                    if state.making?.key == key {
                        state.kept = (key, data)
                        state.making = nil
                    }
                }
                return data
            } catch {
                state.withLock { state in if state.making?.key == key { state.making = nil } }  // the next request tries again
                throw error
            }
        }
    }
}
