import BackgroundDaemon
import BackgroundModel
import BackgroundPolicy
import BackgroundTesting
import Foundation
import Testing

@testable import Background

/// `BGTaskScheduler`: the real one's limits and errors, processing tasks that wait for their
/// conditions and a quiet device and stop when either goes, refresh tasks planned by the fetch
/// policy, and bgctl's debugger commands — with the fixture app launched by bgd.
@Suite(.timeLimit(.minutes(5)))
struct TaskSchedulerTests {
    static let app = "com.example.tasks"
    static let refresh = "com.example.fixture.refresh"
    static let processing = "com.example.fixture.processing"
    /// So that requests needing power stay pending.
    static let onBattery = ConditionsMonitor.Configuration(
        sensing: .fixed(DeviceConditions(power: .battery, batteryLevel: 80, network: .unmetered)))

    func register(
        _ daemon: TestDaemon, behaviour: String = "newData", interval: FetchInterval = .never, extra: [String] = []
    ) async throws -> BackgroundApplication {
        try await registerWithToken(daemon, behaviour: behaviour, interval: interval, extra: extra).application
    }

    func registerWithToken(
        _ daemon: TestDaemon, behaviour: String = "newData", interval: FetchInterval = .never, extra: [String] = []
    ) async throws -> (application: BackgroundApplication, token: String) {
        let token = try await daemon.register(
            Self.app, command: [try BuiltProducts.path(of: "bgd-fixture-app"), behaviour], interval: interval,
            taskIdentifiers: [Self.refresh, Self.processing] + extra
        ).token
        // The app's own calls (submit, pending), made in-process; it never connects, so every task
        // launches the fixture.
        return (
            BackgroundApplication(appID: AppID(rawValue: Self.app)!, token: token, socketPath: daemon.socketPath), token
        )
    }

    func log(_ daemon: TestDaemon) -> [String] {
        let path = daemon.directory + "/state/containers/\(Self.app)/fixture.log"
        return ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    func setConditions(
        _ daemon: TestDaemon, power: DeviceConditions.PowerSource, network: DeviceConditions.Network = .unmetered
    ) async throws {
        _ = try await daemon.admin.send(
            .put, "/v1/env", body: ConditionOverrides(power: power, network: network), as: ConditionsReport.self)
    }

    @Test func submitFollowsTheRealLimitsAndErrors() async throws {
        // On battery, so that the processing requests (which need power) stay pending.
        try await TestDaemon.with(conditions: Self.onBattery) { daemon in
            let processingIDs = (1...11).map { "com.example.p\($0)" }
            let (application, token) = try await registerWithToken(daemon, extra: processingIDs)
            let scheduler = application.taskScheduler
            func error(_ request: some BackgroundTaskRequest) async -> TaskSchedulerError? {
                do {
                    try await scheduler.submit(request)
                    return nil
                } catch let error as TaskSchedulerError {
                    return error
                } catch {
                    Issue.record("unexpected \(error)")
                    return nil
                }
            }
            // Background refresh off (fetch interval never): refresh tasks are unavailable.
            #expect(await error(AppRefreshTaskRequest(identifier: Self.refresh)) == .unavailable)
            #expect(await error(ProcessingTaskRequest(identifier: "com.example.undeclared")) == .notPermitted)
            try await application.setMinimumBackgroundFetchInterval(.minimum)
            #expect(await error(AppRefreshTaskRequest(identifier: Self.refresh)) == nil)
            // The same identifier again replaces the request.
            #expect(
                await error(
                    AppRefreshTaskRequest(
                        identifier: Self.refresh, earliestBeginDate: daemon.clock.now.addingTimeInterval(60))) == nil)
            // 1 refresh at most.
            #expect(await error(AppRefreshTaskRequest(identifier: Self.processing)) == .tooManyPendingTaskRequests)
            for id in processingIDs.prefix(10) {
                #expect(await error(ProcessingTaskRequest(identifier: id, requiresExternalPower: true)) == nil)
            }
            #expect(
                await error(ProcessingTaskRequest(identifier: processingIDs[10], requiresExternalPower: true))
                    == .tooManyPendingTaskRequests)
            #expect(try await scheduler.pendingTaskRequests().count == 11)
            await scheduler.cancel(taskRequestWithIdentifier: processingIDs[0])
            #expect(
                await error(ProcessingTaskRequest(identifier: processingIDs[10], requiresExternalPower: true)) == nil)
            await scheduler.cancelAllTaskRequests()
            #expect(try await scheduler.pendingTaskRequests().isEmpty)
            // Bad input changes nothing.
            let client = DaemonClient(socketPath: daemon.socketPath, token: token)
            for bad in ["", String(repeating: "a", count: 201), "com.example/../x", "with space"] {
                do {
                    try await client.send(
                        .post, "/v1/app/task-requests", body: TaskRequest(identifier: bad, kind: .processing))
                    Issue.record("'\(bad)' must be refused")
                } catch let error as BackgroundError {
                    #expect(error.apiErrorCode == .invalidTaskIdentifier)
                }
            }
            #expect(try await scheduler.pendingTaskRequests().isEmpty)
        }
    }

    /// A processing task that needs power waits on battery, starts on mains (the fixture is
    /// launched with reason processing and minutes of budget), and is stopped — its expiration
    /// handler runs — when the power goes again.
    @Test func processingTasksWaitForTheirConditionsAndStopWhenTheyStop() async throws {
        try await TestDaemon.with(conditions: Self.onBattery) { daemon in
            let application = try await register(daemon, behaviour: "cooperate")
            try await application.taskScheduler.submit(
                ProcessingTaskRequest(identifier: Self.processing, requiresExternalPower: true))
            let overview = try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self)
            #expect(overview.pending.first?.waitingReason?.code == .needsExternalPower, "\(overview)")
            let started = try await daemon.waitFor(
                { activity -> RunRecord? in
                    if case .runStarted(let run) = activity, run.app.rawValue == Self.app { return run }
                    return nil
                }, after: { try await setConditions(daemon, power: .mains) })
            #expect(
                started.taskIdentifier == Self.processing
                    && started.deadline.timeIntervalSince(started.startedAt) == 600)
            #expect(await eventually { log(daemon).contains("task \(Self.processing) processing") })
            let ended = try await daemon.waitForRunEnd(of: Self.app) {
                try await setConditions(daemon, power: .battery)
            }
            #expect(ended.outcome == .failed, "\(ended)")  // the expiration handler said it did not finish
            #expect(log(daemon).contains("task-expired \(Self.processing)"))
            #expect(try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self).pending.isEmpty)
        }
    }

    /// At most two processing tasks run at once: three apps' tasks that need power, the power
    /// plugged in, start two; the third waits (`concurrencyLimit`, in `bgctl tasks`) and starts
    /// when one of them ends. Before, every one started at once.
    @Test func atMostTwoProcessingTasksRunAtOnce() async throws {
        try await TestDaemon.with(conditions: Self.onBattery) { daemon in
            let apps = ["com.example.tasks.a", "com.example.tasks.b", "com.example.tasks.c"]
            for app in apps {
                let token = try await daemon.register(
                    app, command: [try BuiltProducts.path(of: "bgd-fixture-app"), "cooperate"], interval: .never,
                    taskIdentifiers: [Self.processing]
                ).token
                try await BackgroundApplication(
                    appID: AppID(rawValue: app)!, token: token, socketPath: daemon.socketPath
                )
                .taskScheduler.submit(ProcessingTaskRequest(identifier: Self.processing, requiresExternalPower: true))
            }
            try await setConditions(daemon, power: .mains)
            func overview() async throws -> TasksOverview {
                try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self)
            }
            #expect(
                await eventuallyAsync {
                    guard let tasks = try? await overview() else { return false }
                    return tasks.running.count == 2 && tasks.pending.first?.waitingReason?.code == .concurrencyLimit
                })
            let tasks = try await overview()
            #expect(tasks.pending.count == 1, "\(tasks)")
            let first = try #require(tasks.running.first)
            let waiting = try #require(tasks.pending.first)
            _ = try await daemon.waitForRunEnd(of: first.app.rawValue) {
                _ = try await daemon.admin.send(
                    .post, "/v1/tasks/expire", body: TaskTarget(app: first.app, identifier: Self.processing),
                    as: RunningTask.self)
            }
            #expect(
                await eventuallyAsync {
                    guard let tasks = try? await overview() else { return false }
                    return tasks.pending.isEmpty && tasks.running.contains { $0.app == waiting.app }
                })
            #expect(try await overview().running.count == 2)
        }
    }

    /// While an app is in the foreground, processing waits; when it leaves, the task runs.
    @Test func aForegroundAppHoldsProcessingBack() async throws {
        try await TestDaemon.with { daemon in
            let application = try await register(daemon)
            let other = try await daemon.register("com.example.user", command: ["/bin/false"], interval: .never)
            let user = BackgroundApplication(
                appID: AppID(rawValue: "com.example.user")!, token: other.token, socketPath: daemon.socketPath)
            try await user.applicationDidBecomeActive()
            try await application.taskScheduler.submit(ProcessingTaskRequest(identifier: Self.processing))
            let waiting = try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self).pending.first?
                .waitingReason
            #expect(
                waiting?.code == .appInForeground && waiting?.detail.contains("com.example.user") == true,
                "\(String(describing: waiting))")
            let run = try await daemon.waitForRunEnd(of: Self.app) { try await user.applicationDidEnterBackground() }
            #expect(run.outcome == .newData && run.taskIdentifier == Self.processing, "\(run)")
            #expect(log(daemon) == ["task \(Self.processing) processing"])
        }
    }

    /// A running processing task is stopped (its expiration handler runs) when the user comes back.
    @Test func aProcessingTaskStopsWhenTheUserComesBack() async throws {
        try await TestDaemon.with { daemon in
            let application = try await register(daemon, behaviour: "cooperate")
            let other = try await daemon.register("com.example.user", command: ["/bin/false"], interval: .never)
            let user = BackgroundApplication(
                appID: AppID(rawValue: "com.example.user")!, token: other.token, socketPath: daemon.socketPath)
            try await application.taskScheduler.submit(ProcessingTaskRequest(identifier: Self.processing))
            #expect(await eventually { log(daemon).contains("task \(Self.processing) processing") })
            let run = try await daemon.waitForRunEnd(of: Self.app) { try await user.applicationDidBecomeActive() }
            #expect(
                run.outcome == .failed && log(daemon).contains("task-expired \(Self.processing)"),
                "\(run) \(log(daemon))")
        }
    }

    /// A refresh request's earliest begin date holds the app's next wake, which the fetch policy
    /// plans (bgctl why says so); the wake carries out the task, not a fetch.
    @Test func refreshTasksGoThroughTheFetchPolicy() async throws {
        try await TestDaemon.with { daemon in
            let application = try await register(daemon, interval: .minimum)
            let earliest = daemon.clock.now.addingTimeInterval(7200)
            try await application.taskScheduler.submit(
                AppRefreshTaskRequest(identifier: Self.refresh, earliestBeginDate: earliest))
            let wake = try await daemon.plannedWake(of: Self.app) { $0.reasons.contains { $0.code == .taskNotYetDue } }
            #expect(wake == earliest)
            let run = try await daemon.waitForRunEnd(of: Self.app) { daemon.clock.advance(to: earliest) }
            #expect(run.taskIdentifier == Self.refresh && run.outcome == .newData, "\(run)")
            #expect(log(daemon) == ["task \(Self.refresh) appRefresh"])
            #expect(try await application.taskScheduler.pendingTaskRequests().isEmpty)
        }
    }

    /// A task carried out by the app as it runs (connected, not launched): once answered,
    /// nothing of it is kept in the app. Before, its BGTask was, for as long as the app ran, and
    /// an expiration that crossed the answer ran its handler after the fact.
    @Test func aTaskAnsweredLeavesNothingBehindInTheApp() async throws {
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register(
                Self.app, command: ["/bin/false"], interval: .never, taskIdentifiers: [Self.processing])
            let application = BackgroundApplication(
                appID: AppID(rawValue: Self.app)!, token: registered.token, socketPath: daemon.socketPath)
            application.taskScheduler.register(forTaskWithIdentifier: Self.processing) { task in
                task.setTaskCompleted(success: true)
            }
            var connection: Task<Void, any Error>?
            try await daemon.waitFor({ if case .appConnected = $0 { () } else { nil } }) {
                connection = Task { try await application.run() }
            }
            defer { connection?.cancel() }
            let run = try await daemon.waitForRunEnd(of: Self.app) {
                try await application.taskScheduler.submit(ProcessingTaskRequest(identifier: Self.processing))
            }
            #expect(run.outcome == .newData && run.launched == false, "\(run)")
            #expect(application.state.withLock { $0.runningTasks.isEmpty && $0.running.isEmpty })
        }
    }

    /// A task's expiration handler whose answer comes after it returns (Apple's pattern:
    /// cancel an operation queue, call setTaskCompleted(success: false) from the last
    /// operation's completion): the answer stands, and the run ends `failed`, before its time is
    /// up. Before, the handler was cancelled with the expiration, the answer was lost, and the
    /// run ended `expired` at the deadline.
    @Test func anAnswerThatFollowsTheExpirationHandlerStands() async throws {
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register(
                Self.app, command: ["/bin/false"], interval: .never, taskIdentifiers: [Self.processing])
            let application = BackgroundApplication(
                appID: AppID(rawValue: Self.app)!, token: registered.token, socketPath: daemon.socketPath,
                clock: daemon.clock)
            application.taskScheduler.register(forTaskWithIdentifier: Self.processing) { task in
                task.expirationHandler = {
                    Task {
                        await Task.yield()  // the queue's operations wind down first
                        task.setTaskCompleted(success: false)
                    }
                }
            }
            var connection: Task<Void, any Error>?
            try await daemon.waitFor({ if case .appConnected = $0 { () } else { nil } }) {
                connection = Task { try await application.run() }
            }
            defer { connection?.cancel() }
            try await application.taskScheduler.submit(ProcessingTaskRequest(identifier: Self.processing))
            #expect(try await eventuallyAsync { try await daemon.store.runningTasks().count == 1 })
            _ = try await daemon.admin.send(
                .post, "/v1/tasks/expire",
                body: TaskTarget(app: AppID(rawValue: Self.app)!, identifier: Self.processing),
                as: RunningTask.self)
            #expect(
                try await eventuallyAsync {
                    try await daemon.store.runs(of: AppID(rawValue: Self.app)!).first?.outcome != nil
                })
            let run = try await daemon.store.runs(of: AppID(rawValue: Self.app)!).first
            #expect(run?.outcome == .failed, "\(String(describing: run))")
        }
    }

    /// `bgctl tasks run` / `bgctl tasks expire`: Apple's private debugger commands, public.
    /// A task started by hand (`_simulateLaunchForTaskWithIdentifier`) runs whatever its
    /// conditions, to the end: the developer trying it is using an app. Before, the dispatcher's
    /// next pass stopped it as if it had started on its own.
    @Test func aTaskRunByHandIsNotStoppedForItsConditions() async throws {
        try await TestDaemon.with(conditions: Self.onBattery) { daemon in
            let application = try await register(daemon, behaviour: "cooperate")
            try await application.taskScheduler.submit(
                ProcessingTaskRequest(identifier: Self.processing, requiresExternalPower: true))
            let other = try await daemon.register(
                "com.example.other", command: [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"],
                interval: .never, taskIdentifiers: ["com.example.other.work"])
            let otherApp = BackgroundApplication(
                appID: AppID(rawValue: "com.example.other")!, token: other.token, socketPath: daemon.socketPath)
            let user = try await daemon.register("com.example.user", command: ["/bin/false"], interval: .never)
            let userApp = BackgroundApplication(
                appID: AppID(rawValue: "com.example.user")!, token: user.token, socketPath: daemon.socketPath)
            try await userApp.applicationDidBecomeActive()
            try await otherApp.taskScheduler.submit(ProcessingTaskRequest(identifier: "com.example.other.work"))

            _ = try await daemon.admin.send(
                .post, "/v1/tasks/run", body: TaskTarget(app: AppID(rawValue: Self.app)!, identifier: Self.processing),
                as: RunRecord.self)
            #expect(await eventually { log(daemon).contains("task \(Self.processing) processing") })
            // The user leaves: the other app's task starts, so the passes that saw the user (and
            // the battery) are over.
            _ = try await daemon.waitFor(
                { activity -> RunRecord? in
                    if case .runStarted(let run) = activity, run.app.rawValue == "com.example.other" { return run }
                    return nil
                }, after: { try await userApp.applicationDidEnterBackground() })
            let run = try await daemon.waitForRunEnd(of: Self.app) {
                _ = try await daemon.admin.send(
                    .post, "/v1/tasks/expire",
                    body: TaskTarget(app: AppID(rawValue: Self.app)!, identifier: Self.processing), as: RunningTask.self
                )
            }
            #expect(run.outcome == .failed && run.trigger == .manual, "\(run)")
            #expect(log(daemon).filter { $0.hasPrefix("task-expired") }.count == 1, "\(log(daemon))")
        }
    }

    @Test func bgctlRunsAndExpiresATask() async throws {
        try await TestDaemon.with(conditions: Self.onBattery) { daemon in
            let application = try await register(daemon, behaviour: "cooperate")
            try await application.taskScheduler.submit(
                ProcessingTaskRequest(identifier: Self.processing, requiresExternalPower: true))
            let bgctl = try BuiltProducts.path(of: "bgctl")
            let listed = try await Command.run(bgctl, ["tasks", "--socket", daemon.socketPath])
            #expect(
                listed.standardOutput.contains(Self.processing) && listed.standardOutput.contains("needsExternalPower"),
                "\(listed.standardOutput)")
            let started = try await Command.run(
                bgctl, ["tasks", "run", Self.app, Self.processing, "--socket", daemon.socketPath])
            #expect(started.status == 0, "\(started.standardError)")
            #expect(await eventually { log(daemon).contains("task \(Self.processing) processing") })
            let running = try await Command.run(bgctl, ["tasks", "--socket", daemon.socketPath])
            #expect(
                running.standardOutput.contains("Running:") && running.standardOutput.contains("600s"),
                "\(running.standardOutput)")
            let run = try await daemon.waitForRunEnd(of: Self.app) {
                let expired = try await Command.run(
                    bgctl, ["tasks", "expire", Self.app, Self.processing, "--socket", daemon.socketPath])
                #expect(expired.status == 0, "\(expired.standardError)")
            }
            #expect(run.outcome == .failed && log(daemon).contains("task-expired \(Self.processing)"), "\(run)")
            // Nothing pending or running any more: both commands say what to do.
            let again = try await Command.run(
                bgctl, ["tasks", "run", Self.app, Self.processing, "--socket", daemon.socketPath])
            #expect(
                again.status != 0 && again.standardError.contains("no pending task request"), "\(again.standardError)")
            let notRunning = try await Command.run(
                bgctl, ["tasks", "expire", Self.app, Self.processing, "--socket", daemon.socketPath])
            #expect(
                notRunning.status != 0 && notRunning.standardError.contains("is not running"),
                "\(notRunning.standardError)")
        }
    }
}
