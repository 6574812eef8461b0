import Background
import BackgroundDaemon
import BackgroundGateway
import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Logging
import ServiceLifecycle

/// A real bgd, in this process, on a temporary directory and socket, driven by a `ManualClock`.
///
/// ```swift
/// try await TestDaemon.with { daemon in
///     let registered = try await daemon.register("com.example.app", command: [fixture], interval: .minimum)
///     daemon.clock.advance(by: .seconds(15 * 60))
///     let run = try await daemon.waitForRunEnd(of: registered.app.id)
/// }
/// ```
public struct TestDaemon: Sendable {
    public let daemon: Daemon
    public let clock: ManualClock
    public let directory: String
    public var socketPath: String { daemon.configuration.socketPath }
    public var store: BackgroundStore { daemon.store }
    public var activity: ActivityFeed { daemon.activity }
    /// A client for the operator's endpoints.
    public var admin: DaemonClient { DaemonClient(socketPath: socketPath) }

    /// Starts a daemon, runs `body`, then stops the daemon and removes its directory.
    public static func with<T: Sendable>(
        budget: RunBudget = RunBudget(), fetchPolicy: FetchPolicy.Configuration = .init(),
        usage: UsageTracker.Configuration = .init(), clock: ManualClock = ManualClock(), directory: String? = nil,
        conditions: ConditionsMonitor.Configuration = .init(sensing: .fixed(.unconstrained)),
        transfers: TransferService.Configuration = .init(), push: PushGateway.Configuration? = nil,
        backgroundTime: BackgroundTimePolicy = BackgroundTimePolicy(),
        processing: ProcessingTaskPolicy = ProcessingTaskPolicy(),
        dashboard: DashboardServer.Configuration? = nil, appCgroups: Bool = true,
        retention: HistoryPruner.Configuration = .init(), pushRelay: PushUplink.Configuration = .init(),
        _ body: @Sendable (TestDaemon) async throws -> T
    ) async throws -> T {
        let directory = directory ?? TemporaryDirectory.make()
        let configuration = Daemon.Configuration(
            stateDirectory: directory + "/state", socketPath: directory + "/bgd.sock", durability: .normal,
            budget: budget,
            lingerGrace: .seconds(5), fetchPolicy: fetchPolicy, usage: usage, conditions: conditions,
            transfers: transfers,
            push: push,
            backgroundTime: backgroundTime, processing: processing, dashboard: dashboard, appCgroups: appCgroups,
            retention: retention, pushRelay: pushRelay)
        var logger = Logger(label: "bg.daemon")
        // Quiet unless asked: BGD_TEST_LOG_LEVEL=debug swift test …
        logger.logLevel =
            ProcessInfo.processInfo.environment["BGD_TEST_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        let daemon = try await Daemon(configuration: configuration, clock: clock, logger: logger)
        let test = TestDaemon(daemon: daemon, clock: clock, directory: directory)
        // Stopped by a graceful shutdown, as bgd is on SIGTERM: cancelling a NIO server while a
        // connection is still being accepted traps (apple/swift-nio#3481).
        let (ready, readyContinuation) = AsyncStream<Void>.makeStream()
        let services = ServiceGroup(
            configuration: .init(
                services: [ReadyReporting(daemon: daemon, onReady: { readyContinuation.yield() })], logger: logger))
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                defer { readyContinuation.finish() }  // a daemon that fails to start must not leave us waiting
                try await services.run()
                return nil
            }
            var isReady = false
            for await _ in ready {
                isReady = true
                break
            }
            if !isReady { _ = try await group.next() }
            do {
                let result = try await body(test)
                await services.triggerGracefulShutdown()
                try await group.waitForAll()
                return result
            } catch {
                await services.triggerGracefulShutdown()
                try? await group.waitForAll()
                throw error
            }
        }
    }

    /// Registers an app through the API and returns its token.
    @discardableResult
    public func register(
        _ id: String, command: [String], interval: FetchInterval = .minimum, taskIdentifiers: [String]? = nil
    ) async throws -> RegisteredApp {
        try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: id)!, launchCommand: LaunchCommand(command)!, fetchInterval: interval,
                taskIdentifiers: taskIdentifiers),
            as: RegisteredApp.self)
    }

    /// Waits until `predicate` matches an activity emitted after this call started, running
    /// `trigger` once subscribed (so the activity it causes cannot be missed).
    public func waitFor<T: Sendable>(
        _ predicate: @escaping @Sendable (Activity) -> T?, after trigger: () async throws -> Void = {}
    ) async throws -> T {
        let feed = activity.subscribe()
        try await trigger()
        for await activity in feed {
            if let value = predicate(activity) { return value }
        }
        throw CancellationError()
    }

    /// Whether the app holds an event stream to bgd now.
    public func isConnected(_ app: String) async throws -> Bool {
        try await admin.send(.get, "/v1/apps/\(app)", as: AppSummary.self).isConnected
    }

    /// Waits until the app has connected its event stream.
    public func waitUntilConnected(_ app: String) async throws {
        try await waitUntil { try await isConnected(app) }
    }

    /// Waits until `condition` holds, checking it now and again after each activity of the daemon.
    public func waitUntil(_ condition: () async throws -> Bool) async throws {
        let feed = activity.subscribe()
        if try await condition() { return }
        for await _ in feed {
            if try await condition() { return }
        }
        throw CancellationError()
    }

    /// Waits for the next run of `app` to end, after running `trigger`.
    public func waitForRunEnd(of app: String, after trigger: () async throws -> Void = {}) async throws -> RunRecord {
        try await waitFor(
            { activity in
                if case .runEnded(let run) = activity, run.app.rawValue == app { return run }
                return nil
            }, after: trigger)
    }

    /// What `bgctl why` would say about the app.
    public func why(_ app: String) async throws -> WakeExplanation {
        try await admin.send(.get, "/v1/apps/\(app)/why", as: WakeExplanation.self)
    }

    /// The app's next planned wake once the scheduler has planned one (it plans after every
    /// registration and every run): waits for the scheduler, never for time.
    public func plannedWake(
        of app: String, where accept: @Sendable (WakeExplanation) -> Bool = { _ in true }
    ) async throws -> Date {
        let feed = activity.subscribe()
        var iterator = feed.makeAsyncIterator()
        while true {
            let why = try await why(app)
            // Only a plan that has caught up with the last run, made while none is in flight.
            let isCurrent = why.running == nil && why.basedOnRun == why.recentRuns.first?.id
            if let next = why.nextWake, isCurrent, accept(why) { return next }
            while true {
                guard let activity = await iterator.next() else { throw TestDaemonError.noWakePlanned(app) }
                if case .planned = activity { break }
            }
        }
    }
}

public enum TestDaemonError: Error {
    case noWakePlanned(String)
    case productNotBuilt(String)
}

/// Finds the executables SwiftPM built beside the test bundle (bgd, bgctl, NewsFeed, fixtures).
public enum BuiltProducts {
    public static var directory: String {
        if let override = ProcessInfo.processInfo.environment["BGD_PRODUCTS_DIR"] { return override }
        var url = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
        // The test runner is .build/<triple>/debug/<package>PackageTests.xctest (a file on Linux,
        // a bundle on macOS); the products sit in the same directory.
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.isExecutableFile(atPath: url.appendingPathComponent("bgd").path) { return url.path }
        }
        return FileManager.default.currentDirectoryPath + "/.build/debug"
    }

    public static func path(of product: String) throws -> String {
        let path = directory + "/" + product
        guard FileManager.default.isExecutableFile(atPath: path) else { throw TestDaemonError.productNotBuilt(path) }
        return path
    }
}

/// The daemon as a service that says when its socket accepts connections.
private struct ReadyReporting: Service {
    let daemon: Daemon
    let onReady: @Sendable () async -> Void
    func run() async throws { try await daemon.run(onReady: onReady) }
}
