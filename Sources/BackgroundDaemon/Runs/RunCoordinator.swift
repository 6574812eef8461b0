import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Logging
import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Carries background runs out — fetches, pushes, BGTaskScheduler tasks, and the events of
/// transfers: records a run and its event, delivers the event to a connected app or has the
/// app launched, keeps the budget (the expiration warning, then the end), takes the app's answer
/// with what the run cost, and notices a process that exits without one.
///
/// It decides nothing about *when* to run (that is the policies, via `Scheduler`, the push
/// dispatcher, the task dispatcher) and touches no process: `ProcessSupervisor` launches and
/// ends them. Everything it learns goes to the store first, then to the activity feed.
public actor RunCoordinator: Service {
    public struct Configuration: Sendable {
        public var budget: RunBudget
        /// How long a processing task may run.
        public var processingBudget: Duration
        /// How long an app that answered may take to exit before it is ended.
        public var lingerGrace: Duration
        public var socketPath: String
        /// Whether launched apps are confined to their container (where the launcher can).
        public var confineApps: Bool
        /// How soon an app is launched again for transfer events it did not handle.
        public var eventsRelaunch: EventsRelaunchBackoff

        public init(
            budget: RunBudget = RunBudget(), processingBudget: Duration = .seconds(600),
            lingerGrace: Duration = .seconds(5), socketPath: String, confineApps: Bool = true,
            eventsRelaunch: EventsRelaunchBackoff = EventsRelaunchBackoff()
        ) {
            self.eventsRelaunch = eventsRelaunch
            self.processingBudget = processingBudget
            self.confineApps = confineApps
            self.budget = budget
            self.lingerGrace = lingerGrace
            self.socketPath = socketPath
        }
    }

    public enum Failure: Error, Equatable {
        case runNotFound(RunID)
        case runAlreadyEnded(RunRecord)
    }

    private struct Flight {
        var run: RunRecord
        var warned = false
        /// The run's budget (processing tasks get minutes, everything else the fetch budget).
        var budget: RunBudget
        /// The app's CPU time when the run started (what the run cost is the difference).
        var cpuAtStart: UInt64 = 0
        /// `WallClock.awake` when the run started: its budget counts the time the machine ran
        /// since, not the wall clock, which a suspend or a clock set forward moves past the
        /// deadline at once (and one set back stretched by as much).
        var awakeAtStart: Duration
        /// Given to the app as the user runs it (no launch): its process's exit ends the run.
        var toRunningApp = false
        /// That process, as the app last reported it (nil: it has not, or a process bgd
        /// launched reported last): another's exit (an older instance still shutting down)
        /// leaves the run alone.
        var runningAppProcess: Int32?
    }

    /// A process launched for the app's background work: its launch token, and the run it
    /// carries (a fetch, a push, a task, or the app's transfer events).
    private struct Launch {
        var app: AppID
        var token: AppToken
        var run: RunID
        /// Told to exit (its run answered, or its events are handled): no new run is given to it.
        var exitRequested = false
    }

    private let store: BackgroundStore
    private let stateDirectory: StateDirectory
    private let broker: EventBroker
    private let supervisor: ProcessSupervisor
    private let tokens: TokenIssuer
    private let activity: ActivityFeed
    private let clock: any WallClock
    private let configuration: Configuration
    private let schedulerDoorbell: Doorbell
    /// Told when an app has events to handle and when it is done, so it is continued from
    /// suspension and not suspended meanwhile.
    private let lifecycle: LifecycleSupervisor?
    /// Also rung when a run ends (the push dispatcher waits for an app's run to end).
    private let runEndedDoorbells: [Doorbell]
    private let logger: Logger

    private var flights: [RunID: Flight] = [:]
    private var launches: [Int32: Launch] = [:]
    /// Apps whose transfer events wait for a launch the backoff put off, and until when on
    /// `elapsed`: decided once, and launched when it comes, whatever the wall clock did.
    private var deferredEvents: [AppID: Duration] = [:]
    /// Apps whose transfer events came while their only launched process was on its way out
    /// (told to exit, it reads no more): launched for them again once it has exited.
    private var eventsAfterExit: Set<AppID> = []
    /// Apps the user runs whose last connection closed while a run was theirs, with no process
    /// bgd watches (an app that never reported its state): when, on `elapsed`, to end those
    /// runs unless the app has connected again.
    private var closedWithRuns: [AppID: Duration] = [:]
    /// How long an app whose connection closed mid-run has to connect again (the library does
    /// within 5 s) before the run is taken for crashed.
    static let reconnectGrace = Duration.seconds(10)
    private let timers = Doorbell()

    public init(
        store: BackgroundStore, stateDirectory: StateDirectory, broker: EventBroker, supervisor: ProcessSupervisor,
        tokens: TokenIssuer, activity: ActivityFeed, clock: any WallClock, configuration: Configuration,
        schedulerDoorbell: Doorbell, runEndedDoorbells: [Doorbell] = [], lifecycle: LifecycleSupervisor? = nil,
        logger: Logger
    ) {
        self.lifecycle = lifecycle
        self.runEndedDoorbells = runEndedDoorbells
        self.store = store
        self.stateDirectory = stateDirectory
        self.broker = broker
        self.supervisor = supervisor
        self.tokens = tokens
        self.activity = activity
        self.clock = clock
        self.configuration = configuration
        self.schedulerDoorbell = schedulerDoorbell
        self.logger = logger
    }

    // MARK: Service

    public func run() async throws {
        await timers.serve("runs", on: clock, logger: logger, untilElapsed: { await self.superviseBudgets() })
        // Ends the store could not take (a full disk) are written now if they can be: an answer
        // lost here would make its run up at the next start, and the app handle it again.
        for (id, end) in unrecordedEnds { _ = await record(end: end, of: id) }
        // bgd is stopping: the supervisor ends the processes; the runs are made up at the next start.
        for id in flights.keys {
            await end(id, outcome: .interrupted, detail: "bgd shut down while the run was in flight")
        }
    }

    // MARK: Starting runs

    /// Starts a run of any kind for `app`: records it with its event (and what it takes: a push,
    /// a task request), then delivers to the app in the foreground or launches it. A processing
    /// task has minutes (`processingBudget`); every other run the fetch budget.
    public func start(
        _ start: RunStart, for app: AppID, trigger: RunTrigger, reasons: [DecisionReason]
    ) async throws -> RunRecord {
        var budget = configuration.budget
        if case .task(_, .processing, _) = start { budget.budget = configuration.processingBudget }
        // Read with the start time: the budget counts from the run's start, not from after its commit.
        let (now, awake) = (clock.now, clock.awake)
        let run = try await store.startRun(
            start, for: app, trigger: trigger, reasons: reasons, budget: budget.budget, now: now)
        return try await carryOut(run, reason: Self.launchReason(for: start), budget: budget, awakeAtStart: awake)
    }

    /// What the launched process is told it was started for.
    static func launchReason(for start: RunStart) -> LaunchReason {
        switch start {
        case .fetch, .task(_, .appRefresh, _): .fetch
        case .task(_, .processing, _): .processing
        case .push: .remoteNotification
        case .events: .urlSession
        }
    }

    /// Asks the app to wrap a run up now (`bgctl tasks expire`, a processing task whose
    /// conditions stopped holding): its expiration handlers run at once, and it is ended if it
    /// has not answered by the expiration lead.
    public func expireEarly(_ id: RunID) -> Bool {
        guard var flight = flights[id] else { return false }
        let ran = clock.awake - flight.awakeAtStart
        if ran + flight.budget.expirationLead < flight.budget.budget {
            // Shift the budget so that it ends expirationLead from now.
            flight.budget.budget = flight.budget.expirationLead + ran
        }
        flights[id] = flight
        warn(flight)
        timers.ring()
        return true
    }

    /// A recorded run starts: supervised from now, its event goes to the app in the foreground or
    /// the app is launched for it.
    private func carryOut(
        _ run: RunRecord, reason: LaunchReason, budget: RunBudget, awakeAtStart: Duration
    ) async throws -> RunRecord {
        Failpoint.runAfterStartCommit.hit()
        await supervisor.startMemoryPeak(of: run.app)
        flights[run.id] = Flight(
            run: run, budget: budget, cpuAtStart: await supervisor.cpuMicroseconds(of: run.app),
            awakeAtStart: awakeAtStart)
        activity.emit(.runStarted(run))
        logger.info(
            "Run started",
            metadata: [
                "app.id": "\(run.app)", "run.id": "\(run.id)", "wake.trigger": "\(run.trigger)",
                "wake.reason": "\(run.reasons.first?.code.rawValue ?? "none")",
            ])
        if broker.isConnectedInForeground(run.app) {
            flights[run.id]?.toRunningApp = true
            broker.give(run.id, of: run.app, to: .runningApp)
            let process = await lifecycle?.runningProcess(of: run.app)
            flights[run.id]?.runningAppProcess = process
            await lifecycle?.workStarted(for: run.app, run: run.id)
            broker.eventsAvailable(for: run.app)
        } else if let pid = launches.first(where: { $0.value.app == run.app && !$0.value.exitRequested })?.key,
            await supervisor.phase(of: pid).map({ ProcessControl(phase: $0).canBeSpared }) == true,
            // Read again after the wait: it may have exited, or been told to, meanwhile.
            launches[pid].map({ !$0.exitRequested && $0.app == run.app }) == true
        {
            // A process bgd launched for the app still runs (for url-session events, say): the
            // run is its, not a second process's — two would be fed the same events.
            launches[pid]?.run = run.id
            if let token = launches[pid]?.token { broker.give(run.id, of: run.app, to: .launched(token)) }
            await supervisor.spare(pid)
            await lifecycle?.workStarted(for: run.app, run: run.id)
            broker.eventsAvailable(for: run.app)
            try? await store.recordLaunch(of: run.id, processID: pid, startTicks: LaunchedProcess.startTicks(of: pid))
        } else {
            await launch(run.app, reason: reason, for: run)
        }
        timers.ring()
        return try await store.run(run.id) ?? run
    }

    /// Events wait for the app (a transfer ended): a connected app is told; for one that is not
    /// running, a run of its own (trigger `transferEvents`, the fetch budget) launches it with
    /// reason url-session, and ends `eventsHandled` once the app has acknowledged them all —
    /// or as any run ends: expired, crashed, interrupted.
    /// An app whose launches for events keep ending without handling them is launched for them
    /// again only after `EventsRelaunchBackoff`'s wait; the events wait meanwhile (a timer
    /// brings them back).
    public func deliverEvents(to app: AppID) async { await deliverEvents(to: app, waited: false) }

    /// `waited`: the backoff's wait for this app is over; launch without asking it again (asked
    /// again with the wall clock set back, it would put the launch off anew each time).
    private func deliverEvents(to app: AppID, waited: Bool) async {
        if broker.isConnectedInForeground(app)
            || launches.values.contains(where: { $0.app == app && !$0.exitRequested })
        {
            deferredEvents[app] = nil
            await lifecycle?.workStarted(for: app, run: nil)
            broker.eventsAvailable(for: app)
            return
        }
        if launches.values.contains(where: { $0.app == app }) {
            // A process launched for the app is exiting: told so, it reads no more events, and a
            // second process beside it would be handed the same ones. Once it has exited.
            eventsAfterExit.insert(app)
            return
        }
        if !waited {
            // Put off already: the events wait for that launch.
            guard deferredEvents[app] == nil else { return }
            let now = clock.now
            if let notBefore = configuration.eventsRelaunch.notBefore(
                now: now, runs: (try? await store.runs(of: app)) ?? []),
                notBefore > now
            {
                logger.notice(
                    "The app's launches for its transfer events keep ending without handling them; the events wait",
                    metadata: ["app.id": "\(app)", "launch.at": "\(WireCoding.format(notBefore))"])
                deferredEvents[app] = clock.elapsed + notBefore.duration(since: now)
                timers.ring()
                return
            }
        }
        deferredEvents[app] = nil
        do {
            _ = try await start(.events, for: app, trigger: .transferEvents, reasons: [])
        } catch StoreError.runAlreadyInFlight {
            // A run is in flight (its process not yet up): the events go with it.
            broker.eventsAvailable(for: app)
        } catch {
            logger.warning(
                "Cannot start a run for the app's transfer events; they wait",
                metadata: ["app.id": "\(app)", "error": "\(error)"])
        }
    }

    /// The app acknowledged events; with none left open, a run launched for them is done: it
    /// ends `eventsHandled`, and its process is told to exit and ended after the linger grace.
    public func eventsAcknowledged(by app: AppID, openRemaining: Int) async {
        guard openRemaining == 0 else { return }
        await endEventsRuns(of: app, outcome: .eventsHandled, detail: nil)
    }

    /// The app's transfer events went unacknowledged past their retention and were closed as
    /// expired (`HistoryPruner`); with none left open, a run launched for them has nothing to
    /// deliver: it ends `cancelled` and its process is told to exit, as when the app acknowledges
    /// the last one. Before, it sat out its budget and ended `expired`, which blamed the app and
    /// counted toward `EventsRelaunchBackoff`.
    public func eventsExpired(for app: AppID, openRemaining: Int) async {
        guard openRemaining == 0 else { return }
        await endEventsRuns(of: app, outcome: .cancelled, detail: "its transfer events expired unacknowledged")
    }

    /// Ends the app's runs launched for transfer events and tells their processes to exit, then
    /// ended after the linger grace.
    private func endEventsRuns(of app: AppID, outcome: RunOutcome, detail: String?) async {
        for (id, flight) in flights where flight.run.app == app && flight.run.trigger == .transferEvents {
            await end(id, outcome: outcome, detail: detail)
            for (pid, launch) in launches where launch.run == id && !launch.exitRequested {
                launches[pid]?.exitRequested = true
                // Counted again at its exit: an event that came after the count that ended this
                // run (the app had acknowledged all it had) was only nudged to a process now told
                // to exit, and nothing else would launch the app for it.
                eventsAfterExit.insert(app)
                await supervisor.end(pid, after: configuration.lingerGrace, grace: configuration.budget.killGrace)
                broker.send(.exit, to: app)
            }
        }
        await lifecycle?.workEnded(for: app, run: nil)
    }

    private func launch(_ app: AppID, reason: LaunchReason, for run: RunRecord) async {
        let token = tokens.issueLaunchToken(for: app, run: run.id)
        // Given before the process exists: the app as the user runs it, connecting meanwhile,
        // does not take this run's event.
        broker.give(run.id, of: app, to: .launched(token))
        var launched: Int32?
        do {
            guard let stored = try await store.app(app) else { throw StoreError.appNotFound(app) }
            let container = try stateDirectory.container(for: app)
            var environment = ProcessInfo.processInfo.environment.filter { LaunchEnvironment.inherits($0.key) }
            environment[LaunchEnvironment.reason] = reason.rawValue
            environment[LaunchEnvironment.appID] = app.rawValue
            environment[LaunchEnvironment.socket] = configuration.socketPath
            environment[LaunchEnvironment.token] = token.rawValue
            environment[LaunchEnvironment.container] = container
            environment[LaunchEnvironment.run] = run.id.description
            var confinement: Confinement?
            if configuration.confineApps {
                // Its own temporary directory: the rest of the file system is read-only to it.
                let temporary = container + "/tmp"
                try? FileManager.default.createDirectory(
                    atPath: temporary, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
                environment["TMPDIR"] = temporary
                confinement = Confinement(
                    hidden: [
                        stateDirectory.path, DaemonLocation.operatorTokenPath(socketPath: configuration.socketPath),
                    ], writable: [container])
            }
            let process = try await supervisor.launch(
                LaunchSpec(
                    command: stored.launchCommand, environment: environment, workingDirectory: container,
                    logFile: container + "/launch.log", confinement: confinement),
                for: app)
            Failpoint.runAfterLaunch.hit()
            launched = process.processID
            launches[process.processID] = Launch(app: app, token: token, run: run.id)
            try await store.recordLaunch(of: run.id, processID: process.processID, startTicks: process.startTicks)
            activity.emit(.processLaunched(app, processID: process.processID))
            logger.debug(
                "Launched app",
                metadata: ["app.id": "\(app)", "reason": "\(reason.rawValue)", "pid": "\(process.processID)"])
            timers.ring()
        } catch {
            tokens.revokeLaunchToken(token)
            if let pid = launched {
                // Started, but its pid not written down (a full disk): with its token revoked it
                // can do nothing, and a bgd killed now would not find it again. Ended, as an
                // overrun is; its exit clears its entry.
                launches[pid]?.exitRequested = true
                await supervisor.terminate(pid, killAfter: configuration.budget.killGrace)
            }
            logger.info("Launch failed", metadata: ["app.id": "\(app)", "error": "\(error)"])
            await end(run.id, outcome: .launchFailed, detail: "\(error)")
        }
    }

    // MARK: Answers and exits

    /// The app answered a run. Throws when the run is not the app's, or has already ended (the
    /// first outcome recorded stands).
    public func reportResult(
        _ result: BackgroundFetchResult, for runID: RunID, from app: AppID
    ) async throws -> RunRecord {
        guard let run = try await store.run(runID), run.app == app else { throw Failure.runNotFound(runID) }
        guard let record = await end(runID, outcome: RunOutcome(result), detail: nil) else {
            // Taken but not yet written (a full disk): said as the disk's trouble (507, 503), not
            // as "already ended" — the app then leaves its event open, and the end written later
            // settles it; a bgd that dies first makes the run up, as it never said it was done.
            if let held = unrecordedEnds[runID], held.outcome == RunOutcome(result) { throw held.trouble }
            if let first = ending[runID] ?? unrecordedEnds[runID]?.outcome {
                var ended = run
                ended.outcome = first  // the first end stands, written or not yet
                throw Failure.runAlreadyEnded(ended)
            }
            throw Failure.runAlreadyEnded(try await store.run(runID) ?? run)
        }
        Failpoint.runAfterResultCommit.hit()
        await dismissLaunches(of: runID, for: app)
        return record
    }

    /// The processes bgd launched for an answered run: told to exit, and ended after the linger.
    private func dismissLaunches(of runID: RunID, for app: AppID) async {
        for (pid, launch) in launches where launch.app == app && launch.run == runID && !launch.exitRequested {
            launches[pid]?.exitRequested = true
            await supervisor.end(pid, after: configuration.lingerGrace, grace: configuration.budget.killGrace)
            broker.send(.exit, to: app)
        }
    }

    /// A process launched for the app ended (the supervisor reaped it).
    public func processExited(_ exit: ProcessSupervisor.Exit) async {
        guard let launch = launches.removeValue(forKey: exit.processID) else { return }
        tokens.revokeLaunchToken(launch.token)
        let status = exit.status ?? .exited(0)
        // The run's end first: whoever hears of the exit finds the run over.
        if flights[launch.run] != nil {
            await end(launch.run, outcome: .crashed, detail: "the app \(status) before answering")
        }
        activity.emit(.processExited(launch.app, processID: exit.processID, status: status))
        logger.debug("App exited", metadata: ["app.id": "\(launch.app)", "status": "\(status)"])
        // Events that came while it was exiting, unless another process has handled them since.
        // (The note stays until the app's last launched process is gone: one that took them and
        // crashed leaves them to this.)
        if !launches.values.contains(where: { $0.app == launch.app }), eventsAfterExit.remove(launch.app) != nil,
            (try? await store.openEventCount(for: launch.app)) ?? 1 > 0
        {
            await deliverEvents(to: launch.app)
        }
    }

    /// A process the user started for `app` exited (the supervisor took it on when it reported
    /// its state). A run given to the app as it ran will not be answered: it ends `crashed`, as
    /// a launched process's does, and a push it carried goes again. Before, it sat out its
    /// budget and ended `expired`, which dropped the push (and a processing task's held the
    /// app's next run for minutes).
    public func runningAppExited(_ exit: ProcessSupervisor.Exit) async {
        let status = exit.status ?? .exited(0)
        for (id, flight) in flights
        where flight.run.app == exit.app && flight.toRunningApp
            && (flight.runningAppProcess ?? exit.processID) == exit.processID
        {
            await end(id, outcome: .crashed, detail: "the app (process \(exit.processID)) \(status) before answering")
        }
    }

    /// The app as the user runs it has no connection left. A run given to it whose process bgd
    /// watches ends with that process (`runningAppExited`); one bgd cannot watch (an app that
    /// never reported its state) is taken for crashed unless the app connects again within
    /// `reconnectGrace`. Before, such a run waited out its budget and ended `expired`, blamed on
    /// the app, and its push was dropped rather than sent again.
    public func foregroundConnectionClosed(_ app: AppID) {
        guard flights.values.contains(where: { unwatched($0, of: app) }) else { return }
        closedWithRuns[app] = clock.elapsed + Self.reconnectGrace
        timers.ring()
    }

    /// The app as the user runs it connected (again): a grace running from an earlier close is
    /// over, and a later close starts its own.
    public func foregroundConnectionOpened(_ app: AppID) { closedWithRuns[app] = nil }

    private func unwatched(_ flight: Flight, of app: AppID) -> Bool {
        flight.run.app == app && flight.toRunningApp && flight.runningAppProcess == nil
    }

    /// The app was unregistered: forget its runs and end its processes.
    public func appUnregistered(_ app: AppID) async {
        for id in flights.keys where flights[id]?.run.app == app { broker.runEnded(id) }
        flights = flights.filter { $0.value.run.app != app }
        eventsAfterExit.remove(app)
        await supervisor.endAll(of: app)
        tokens.revokeLaunchTokens(of: app)
        broker.disconnect(app)
    }

    // MARK: Budgets

    /// The run's own time: its start plus the time the machine has run since (`awake`).
    private func budgetNow(of flight: Flight) -> Date {
        flight.run.startedAt.adding(clock.awake - flight.awakeAtStart)
    }

    /// Warns and expires the runs whose budget is up; returns when to look again on the clock's
    /// `elapsed`, not a date: a budget's end is so much running time away, whatever the wall
    /// clock is set to meanwhile.
    private func superviseBudgets() async -> Duration? {
        let (now, elapsed) = (clock.now, clock.elapsed)
        var next: Duration?
        func wake(after wait: Duration) { next = min(next ?? elapsed + wait, elapsed + wait) }
        for id in flights.keys {
            // As it is now: an earlier expiry's wait let other calls in, and a run ended meanwhile
            // (its answer, its exit) is not warned of its expiration after it is over.
            guard let flight = flights[id] else { continue }
            let runNow = budgetNow(of: flight)
            switch flight.budget.step(startedAt: flight.run.startedAt, warned: flight.warned, now: runNow) {
            case .wait(let until):
                wake(after: until.duration(since: runNow))
            case .warn(let nextAt):
                warn(flight)
                wake(after: nextAt.duration(since: runNow))
            case .terminate, .kill:
                // Even when the deadline is found already past (the machine slept, the clock
                // jumped), the app hears of the expiration before it is ended.
                if !flight.warned { warn(flight) }
                await expire(id)
            }
        }
        for (app, due) in deferredEvents {
            guard due <= elapsed else {
                wake(after: due - elapsed)
                continue
            }
            deferredEvents[app] = nil
            // Acknowledged meanwhile (the app connected by itself): nothing to launch it for.
            if (try? await store.openEventCount(for: app)) ?? 1 > 0 { await deliverEvents(to: app, waited: true) }
        }
        for (app, at) in closedWithRuns {
            guard at <= elapsed else {
                wake(after: at - elapsed)
                continue
            }
            closedWithRuns[app] = nil
            guard !broker.isConnectedInForeground(app) else { continue }
            for (id, flight) in flights where unwatched(flight, of: app) {
                await end(
                    id, outcome: .crashed,
                    detail:
                        "the app's connection closed before it answered, and it did not connect again within \(Self.reconnectGrace.humanDescription)"
                )
            }
        }
        if !unrecordedEnds.isEmpty {
            if let retryAt = nextEndRetry, retryAt <= elapsed {
                for (id, end) in unrecordedEnds {
                    // An answer written at last: its launched process is done, as at once.
                    if let record = await record(end: end, of: id), end.outcome.isAnswer {
                        await dismissLaunches(of: id, for: record.app)
                    }
                }
                nextEndRetry = nil
            }
            if !unrecordedEnds.isEmpty {
                let retryAt = nextEndRetry ?? elapsed + .seconds(5)
                nextEndRetry = retryAt
                wake(after: retryAt - elapsed)
            }
        }
        return next
    }

    private func warn(_ flight: Flight) {
        flights[flight.run.id]?.warned = true
        // The budget's end as it stands now (a suspend or `expireEarly` moved it from the stored one).
        let deadline = clock.now.adding(
            flight.budget.deadline(startingAt: flight.run.startedAt).duration(since: budgetNow(of: flight)))
        broker.send(.expire(run: flight.run.id, deadline: deadline), to: flight.run.app)
        activity.emit(.expirationWarned(flight.run.app, flight.run.id))
        logger.debug(
            "Expiration warning sent", metadata: ["app.id": "\(flight.run.app)", "run.id": "\(flight.run.id)"])
    }

    /// The budget ran out without an answer: record it, then end the app's process.
    private func expire(_ id: RunID) async {
        guard let flight = flights[id] else { return }
        await end(id, outcome: .expired, detail: "no answer within the \(flight.budget.budget.humanDescription) budget")
        // SIGKILL follows the grace period after the deadline (at once if that has passed too).
        let killAfter = max(
            .zero, flight.budget.killTime(startingAt: flight.run.startedAt).duration(since: budgetNow(of: flight)))
        for (pid, launch) in launches where launch.run == id {
            launches[pid]?.exitRequested = true
            await supervisor.terminate(pid, killAfter: killAfter)
        }
        logger.info("App overran its budget", metadata: ["app.id": "\(flight.run.app)", "run.id": "\(id)"])
    }

    /// Records a run's end once; later calls for the same run change nothing and return nil.
    @discardableResult
    private func end(_ id: RunID, outcome: RunOutcome, detail: String?) async -> RunRecord? {
        // Ended already — its end being written (the actor serves others while the store
        // writes), or held for a full disk: the first end stands (a late answer does not replace
        // an expiry the disk could not take yet).
        guard unrecordedEnds[id] == nil, ending[id] == nil else { return nil }
        ending[id] = outcome
        defer { ending[id] = nil }
        var usage: RunUsage?
        if let flight = flights.removeValue(forKey: id) {
            let app = flight.run.app
            let cpu = await supervisor.cpuMicroseconds(of: app)
            usage = RunUsage(
                cpuMicroseconds: Int64(cpu >= flight.cpuAtStart ? cpu - flight.cpuAtStart : 0),
                memoryPeakBytes: await supervisor.memoryPeakBytes(of: app).map { Int64($0) })
            await lifecycle?.workEnded(for: app, run: id)
        }
        return await record(end: UnrecordedEnd(outcome: outcome, detail: detail, at: clock.now, usage: usage), of: id)
    }

    /// Trouble is logged at warning, so `journalctl --user -u bgd -p warning` shows it: a run
    /// that failed, crashed, ran out of time or could not launch (issue 18). The fields name
    /// the app and what woke it (`APP_ID=`, `WAKE_REASON=` in the journal).
    private func logEnd(of record: RunRecord) {
        guard let outcome = record.outcome else { return }
        let metadata: Logger.Metadata = [
            "app.id": "\(record.app)", "run.id": "\(record.id)", "outcome": "\(outcome.rawValue)",
            "wake.reason": "\(record.trigger.rawValue)", "detail": "\(record.detail ?? "")",
        ]
        switch outcome {
        case .failed, .crashed, .expired, .launchFailed:
            logger.warning("Run \(outcome.rawValue): \(record.app)", metadata: metadata)
        case .newData, .noData, .interrupted, .cancelled, .eventsHandled:
            logger.info("Run ended: \(record.app)", metadata: metadata)
        }
    }

    /// An end the store could not take (a full disk): kept, and written as soon as it can be,
    /// with the time it really happened — or the run would stay in flight until a restart.
    private struct UnrecordedEnd {
        var outcome: RunOutcome
        var detail: String?
        var at: Date
        var usage: RunUsage?
        /// Why the store did not take it, the last time it was tried.
        var trouble: any Error = CancellationError()
    }
    private var unrecordedEnds: [RunID: UnrecordedEnd] = [:]
    /// Ends being written now, by outcome.
    private var ending: [RunID: RunOutcome] = [:]
    /// On the clock's `elapsed`: a wall clock set back would put the retry off by the step,
    /// and hold the app's every run that long (the run stays in flight in the store).
    private var nextEndRetry: Duration?

    private func record(end: UnrecordedEnd, of id: RunID) async -> RunRecord? {
        // Noted as being written, and still held until written: an end that comes meanwhile (a
        // late answer while a held expiry is retried) finds it and stands aside.
        let outer = ending[id]
        ending[id] = end.outcome
        defer { ending[id] = outer }
        do {
            let written = try await store.finishRun(
                id, outcome: end.outcome, detail: end.detail, usage: end.usage, now: end.at)
            unrecordedEnds[id] = nil
            broker.runEnded(id)  // its events are settled with it
            guard let record = written else { return nil }
            activity.emit(.runEnded(record))
            logEnd(of: record)
            schedulerDoorbell.ring()
            for doorbell in runEndedDoorbells { doorbell.ring() }
            return record
        } catch StoreError.runNotFound {
            unrecordedEnds[id] = nil
            broker.runEnded(id)
            return nil  // the app was unregistered meanwhile
        } catch {
            logger.error(
                "Cannot record the end of a run; trying again in a few seconds",
                metadata: ["run.id": "\(id)", "error": "\(error)"])
            var held = end
            held.trouble = error
            unrecordedEnds[id] = held
            timers.ring()
            return nil
        }
    }
}
