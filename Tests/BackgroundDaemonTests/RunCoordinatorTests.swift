import BackgroundDaemon
import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import BackgroundTesting
import Foundation
import Logging
import Synchronization
import Testing

/// The run coordinator by itself: a real store, the real supervisor, virtual time, and a
/// launcher that records what it is asked to start (no process runs; its pids name nothing,
/// and the test says when one "exits").
@Suite(.timeLimit(.minutes(5)))
struct RunCoordinatorTests {
    /// Records launches; each "process" exits when the test says so.
    final class RecordingLauncher: AppLauncher {
        private let state = Mutex<
            (
                specs: [LaunchSpec], nextPID: Int32,
                exits: [Int32: CheckedContinuation<BackgroundDaemon.ExitStatus, Never>],
                early: [Int32: BackgroundDaemon.ExitStatus], ended: Bool
            )
        >(
            ([], 2_000_000_000, [:], [:], false))

        var launches: [LaunchSpec] { state.withLock { $0.specs } }

        func launch(_ spec: LaunchSpec) throws -> LaunchedProcess {
            state.withLock {
                $0.specs.append(spec)
                $0.nextPID += 1
                return LaunchedProcess(processID: $0.nextPID, startTicks: nil)
            }
        }

        func waitForExit(_ process: LaunchedProcess) async -> BackgroundDaemon.ExitStatus {
            await withCheckedContinuation { continuation in
                let early: BackgroundDaemon.ExitStatus? = state.withLock {
                    if let status = $0.early.removeValue(forKey: process.processID) { return status }
                    if $0.ended { return .signalled(9) }
                    $0.exits[process.processID] = continuation
                    return nil
                }
                if let early { continuation.resume(returning: early) }
            }
        }

        /// Every process still "running" exits, and any the supervisor starts waiting for later
        /// (the end of a test: the supervisor waits for them, and its waiter for a process
        /// launched just before may not be registered yet).
        func exitAll() {
            let waiting = state.withLock { state in
                state.ended = true
                defer { state.exits = [:] }
                return Array(state.exits.values)
            }
            for continuation in waiting { continuation.resume(returning: .signalled(9)) }
        }

        func exit(_ pid: Int32, _ status: BackgroundDaemon.ExitStatus) {
            let waiting = state.withLock {
                let waiting = $0.exits.removeValue(forKey: pid)
                if waiting == nil { $0.early[pid] = status }
                return waiting
            }
            waiting?.resume(returning: status)
        }
    }

    struct Harness {
        let store: BackgroundStore
        let clock: ManualClock
        let launcher: RecordingLauncher
        let supervisor: ProcessSupervisor
        let coordinator: RunCoordinator
        let broker: EventBroker
        /// Not run (no timers): it knows what apps the user runs report of themselves.
        let lifecycle: LifecycleSupervisor
        let app = AppID(rawValue: "com.example.recorded")!
        static let budget = RunBudget(budget: .seconds(30), expirationLead: .seconds(5), killGrace: .seconds(5))
        static let processingBudget = Duration.seconds(600)
    }

    func withHarness(_ body: (Harness) async throws -> Void) async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let stateDirectory = try StateDirectory(path: directory + "/state")
        let store = try BackgroundStore.open(atPath: stateDirectory.databasePath, durability: .normal)
        let clock = ManualClock()
        let launcher = RecordingLauncher()
        var logger = Logger(label: "test")
        logger.logLevel = .critical  // the end of a test cancels the services mid-write; nothing to see
        let supervisor = ProcessSupervisor(
            mode: .signals("test"), launcher: launcher, clock: clock, killGrace: Harness.budget.killGrace,
            logger: logger)
        let broker = EventBroker()
        let activity = ActivityFeed()
        let lifecycle = LifecycleSupervisor(
            policy: BackgroundTimePolicy(), store: store, broker: broker, activity: activity, clock: clock,
            supervisor: supervisor, killGrace: Harness.budget.killGrace, logger: logger)
        let coordinator = RunCoordinator(
            store: store, stateDirectory: stateDirectory, broker: broker, supervisor: supervisor,
            tokens: TokenIssuer(),
            activity: activity, clock: clock,
            configuration: .init(
                budget: Harness.budget, processingBudget: Harness.processingBudget, lingerGrace: .seconds(5),
                socketPath: directory + "/bgd.sock", confineApps: false),
            schedulerDoorbell: Doorbell(), lifecycle: lifecycle, logger: logger)
        await supervisor.onExit { exit in await coordinator.processExited(exit) }
        let harness = Harness(
            store: store, clock: clock, launcher: launcher, supervisor: supervisor, coordinator: coordinator,
            broker: broker, lifecycle: lifecycle)
        _ = try await store.register(
            RegisterAppRequest(id: harness.app, launchCommand: LaunchCommand(["/usr/bin/recorded-app", "--flag"])!),
            tokenHash: "x", now: clock.now)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await supervisor.run() }
            group.addTask { try await coordinator.run() }
            do {
                try await body(harness)
            } catch {
                launcher.exitAll()
                group.cancelAll()
                throw error
            }
            launcher.exitAll()
            group.cancelAll()
        }
    }

    /// Waits for an actor's state to change after virtual time moved (its loop runs on its own,
    /// and the store's work on the store's threads, which a loaded full run may keep busy for
    /// seconds): yields until the condition holds, for at most a minute of real time.
    func until(_ condition: () async -> Bool) async -> Bool {
        let deadline = ContinuousClock.now.advanced(by: .seconds(60))
        while ContinuousClock.now < deadline {
            if await condition() { return true }
            await Task.yield()
        }
        return await condition()
    }

    @Test func aLaunchCarriesTheRunAndTheAppsEnvironment() async throws {
        try await withHarness { h in
            let run = try await h.coordinator.start(.fetch, for: h.app, trigger: .scheduled, reasons: [])
            let spec = try #require(h.launcher.launches.first)
            #expect(spec.command.arguments == ["/usr/bin/recorded-app", "--flag"])
            #expect(spec.environment[LaunchEnvironment.reason] == "fetch")
            #expect(spec.environment[LaunchEnvironment.run] == run.id.description)
            #expect(spec.environment[LaunchEnvironment.appID] == h.app.rawValue)
            #expect(spec.environment[LaunchEnvironment.token]?.isEmpty == false)
            #expect(spec.workingDirectory.hasSuffix("/containers/\(h.app.rawValue)"))
            let ours: Set = [
                LaunchEnvironment.reason, LaunchEnvironment.appID, LaunchEnvironment.socket, LaunchEnvironment.token,
                LaunchEnvironment.container, LaunchEnvironment.run,
            ]
            #expect(
                Set(spec.environment.keys.filter { $0.hasPrefix("BGD_") }) == ours,
                "exactly the app's own BGD_ settings, none of bgd's")
            #expect(try await h.store.run(run.id)?.launched == true && run.kind == .fetch)
        }
    }

    /// One run path: each kind of run is recorded with its kind, launched with its reason, and
    /// given its budget (a processing task minutes, every other run the fetch budget).
    @Test(arguments: [
        (RunStart.fetch, "fetch", 30),
        (.task(identifier: "com.example.recorded.refresh", kind: .appRefresh), "fetch", 30),
        (.task(identifier: "com.example.recorded.work", kind: .processing), "processing", 600),
        (.events, "url-session", 30),
    ])
    func everyKindOfRunStartsOnOnePath(start: RunStart, reason: String, budgetSeconds: Double) async throws {
        try await withHarness { h in
            if case .task(let identifier, let kind, _) = start {
                _ = try await h.store.unregister(h.app, now: h.clock.now)
                _ = try await h.store.register(
                    RegisterAppRequest(
                        id: h.app, launchCommand: LaunchCommand(["/usr/bin/recorded-app"])!, fetchInterval: .minimum,
                        taskIdentifiers: [identifier]),
                    tokenHash: "x", now: h.clock.now)
                try await h.store.submitTaskRequest(
                    TaskRequest(identifier: identifier, kind: kind), for: h.app, now: h.clock.now)
            }
            let run = try await h.coordinator.start(start, for: h.app, trigger: .manual, reasons: [])
            #expect(run.kind == start.kind)
            #expect(run.deadline == run.startedAt.addingTimeInterval(budgetSeconds))
            #expect(h.launcher.launches.first?.environment[LaunchEnvironment.reason] == reason)
        }
    }

    /// No answer: warned at 25 s, expired at 30 s with SIGTERM, SIGKILL at 35 s — on the
    /// supervisor's timeline for the process.
    @Test func anUnansweredRunExpiresAndItsProcessIsEndedOnTime() async throws {
        try await withHarness { h in
            let run = try await h.coordinator.start(.fetch, for: h.app, trigger: .scheduled, reasons: [])
            let started = h.clock.elapsed
            let pid = Int32(2_000_000_001)
            #expect(await h.supervisor.phase(of: pid) == .running)
            h.clock.advance(by: .seconds(29))
            #expect(try await h.store.run(run.id)?.outcome == nil)
            h.clock.advance(by: .seconds(1))
            #expect(await until { (try? await h.store.run(run.id)?.outcome) == .expired })
            #expect(
                await until {
                    await h.supervisor.phase(of: pid) == .terminating(killAt: started + .seconds(35))
                })
            h.clock.advance(by: .seconds(5))
            #expect(await until { await h.supervisor.phase(of: pid) == .killed })
            h.launcher.exit(pid, .signalled(9))
            #expect(await until { await h.supervisor.phase(of: pid) == nil })
            #expect(try await h.store.run(run.id)?.outcome == .expired, "the first outcome stands")
        }
    }

    /// A run's budget counts the time the machine runs: a suspend in the middle (a laptop's lid
    /// closed for an hour) spends none of it, and the run expires 30 s of running after it
    /// started, its SIGKILL 5 s after that. Before, it expired at the resume, its process
    /// killed at once with no SIGTERM, and the app was blamed for the machine's sleep.
    @Test func aRunsBudgetDoesNotCountTheMachinesSleep() async throws {
        try await withHarness { h in
            let run = try await h.coordinator.start(.fetch, for: h.app, trigger: .scheduled, reasons: [])
            let started = h.clock.elapsed
            h.clock.advance(by: .seconds(10))
            h.clock.suspend(for: .seconds(3600))
            h.clock.advance(by: .seconds(19))
            #expect(try await h.store.run(run.id)?.outcome == nil)
            h.clock.advance(by: .seconds(1))
            #expect(await until { (try? await h.store.run(run.id)?.outcome) == .expired })
            #expect(try await h.store.run(run.id)?.endedAt == run.startedAt.addingTimeInterval(3630))
            // The SIGTERM follows the end's commit: waited for, not read at once.
            #expect(
                await until {
                    await h.supervisor.phase(of: 2_000_000_001) == .terminating(killAt: started + .seconds(3635))
                })
        }
    }

    /// Nor does the wall clock's setting move it: set back an hour, the run still expires after
    /// 30 s (before, an hour and 30 s later, holding the app's next run that long); set forward
    /// two days, it does not expire at once (before, the step expired and killed every run in
    /// flight — an NTP step at boot on a machine without a battery-backed clock).
    @Test func aRunsBudgetIgnoresTheWallClocksSetting() async throws {
        try await withHarness { h in
            let back = try await h.coordinator.start(.fetch, for: h.app, trigger: .scheduled, reasons: [])
            h.clock.jump(by: .seconds(-3600))
            h.clock.advance(by: .seconds(30))
            #expect(await until { (try? await h.store.run(back.id)?.outcome) == .expired })
            h.launcher.exit(2_000_000_001, .signalled(15))
            #expect(await until { await h.supervisor.phase(of: 2_000_000_001) == nil })

            let forward = try await h.coordinator.start(.fetch, for: h.app, trigger: .scheduled, reasons: [])
            h.clock.jump(by: .seconds(2 * 86400))
            h.clock.advance(by: .seconds(29))
            #expect(try await h.store.run(forward.id)?.outcome == nil)
            h.clock.advance(by: .seconds(1))
            #expect(await until { (try? await h.store.run(forward.id)?.outcome) == .expired })
            #expect(try await h.store.run(forward.id)?.endedAt == forward.startedAt.addingTimeInterval(2 * 86400 + 30))

            // Its process has its grace whatever the wall clock does meanwhile: set forward a
            // day, no SIGKILL at once (before, the kill time was a wall date, and passed); set
            // back, SIGKILL still 5 s after the SIGTERM (before, an hour later).
            let expired = h.clock.elapsed
            #expect(
                await until {
                    await h.supervisor.phase(of: 2_000_000_002) == .terminating(killAt: expired + .seconds(5))
                })
            h.clock.jump(by: .seconds(86400))
            h.clock.advance(by: .seconds(1))
            #expect(await h.supervisor.phase(of: 2_000_000_002) == .terminating(killAt: expired + .seconds(5)))
            h.clock.jump(by: .seconds(-2 * 86400))
            h.clock.advance(by: .seconds(4))
            #expect(await until { await h.supervisor.phase(of: 2_000_000_002) == .killed })
        }
    }

    /// An answer ends the run at once; the process is told to exit and ended after the linger.
    @Test func anAnsweredRunsProcessIsEndedAfterTheLinger() async throws {
        try await withHarness { h in
            let run = try await h.coordinator.start(.fetch, for: h.app, trigger: .scheduled, reasons: [])
            let pid = Int32(2_000_000_001)
            h.clock.advance(by: .seconds(2))
            let answered = try await h.coordinator.reportResult(.newData, for: run.id, from: h.app)
            #expect(answered.outcome == .newData && answered.cpuMicroseconds != nil)
            let answeredAt = h.clock.elapsed
            #expect(
                await h.supervisor.phase(of: pid)
                    == .exitRequested(terminateAt: answeredAt + .seconds(5), killGrace: .seconds(5)))
            h.clock.advance(by: .seconds(5))
            #expect(
                await until {
                    await h.supervisor.phase(of: pid) == .terminating(killAt: answeredAt + .seconds(10))
                })
            h.launcher.exit(pid, .exited(0))
            #expect(await until { await h.supervisor.phase(of: pid) == nil })
            #expect(try await h.store.run(run.id)?.outcome == .newData)
            await #expect(throws: RunCoordinator.Failure.self) {
                _ = try await h.coordinator.reportResult(.failed, for: run.id, from: h.app)
            }
        }
    }

    /// A process that exits before answering: the run is recorded as crashed, with how it ended.
    @Test func aProcessThatExitsWithoutAnsweringCrashesItsRun() async throws {
        try await withHarness { h in
            let run = try await h.coordinator.start(.fetch, for: h.app, trigger: .scheduled, reasons: [])
            h.launcher.exit(2_000_000_001, .signalled(6))
            #expect(await until { (try? await h.store.run(run.id)?.outcome) == .crashed })
            #expect(try await h.store.run(run.id)?.detail?.contains("SIGABRT") == true)
            // The next run launches a new process (the old one is gone).
            _ = try await h.coordinator.start(.fetch, for: h.app, trigger: .scheduled, reasons: [])
            #expect(h.launcher.launches.count == 2)
        }
    }

    /// Transfer events for an app that is not running: a run of their own launches it (no
    /// special case), ends `eventsHandled` once every event is acknowledged, and its process is
    /// told to exit.
    @Test func transferEventsAreARunOfTheirOwn() async throws {
        try await withHarness { h in
            await h.coordinator.deliverEvents(to: h.app)
            let spec = try #require(h.launcher.launches.first)
            #expect(spec.environment[LaunchEnvironment.reason] == "url-session")
            let run = try #require(try await h.store.runs(of: h.app).first)
            #expect(run.trigger == .transferEvents && run.kind == .events && run.isRunning && run.launched)
            #expect(spec.environment[LaunchEnvironment.run] == run.id.description)
            // A fetch waits: one run at a time.
            await #expect(throws: StoreError.self) {
                _ = try await h.coordinator.start(.fetch, for: h.app, trigger: .manual, reasons: [])
            }
            await h.coordinator.eventsAcknowledged(by: h.app, openRemaining: 1)
            #expect(try await h.store.run(run.id)?.isRunning == true, "events still open")
            await h.coordinator.eventsAcknowledged(by: h.app, openRemaining: 0)
            #expect(try await h.store.run(run.id)?.outcome == .eventsHandled)
            #expect(await firstLaunchIsToldToExit(h))
        }
    }

    /// Events that come while the process launched for earlier ones is on its way out (told to
    /// exit, it reads no more) launch the app again once that process has exited, and not
    /// before: two processes would be handed the same events. Before, the news went to the
    /// exiting process, and the events waited for whatever launched the app next.
    @Test func eventsThatComeWhileTheProcessExitsLaunchTheAppOnceItHasExited() async throws {
        try await withHarness { h in
            try await eventsArriveWhileTheFirstProcessExits(h)
            #expect(await firstLaunchIsToldToExit(h))
            #expect(h.launcher.launches.count == 1, "launched beside the exiting process")
            #expect(await exits(h, 2_000_000_001, .exited(0)))
            #expect(h.launcher.launches.count == 2, "not launched for the new events")
            let runs = try await h.store.runs(of: h.app)
            #expect(runs.count == 2 && runs[0].trigger == .transferEvents && runs[0].isRunning)
        }
    }

    /// A run given to the app the user runs ends when that process exits, not when another of
    /// its processes does (an older instance still shutting down, noticed late): the run is the
    /// newer one's to answer. Before, any exit of the app's ended it `crashed`, the push it
    /// carried went again, and the newer process's answer was refused.
    @Test func aRunGivenToARunningAppEndsOnlyWithItsOwnProcess() async throws {
        try await withHarness { h in
            guard let stream = h.broker.subscribe(h.app, owner: .runningApp) else {
                Issue.record("no stream")
                return
            }
            defer { h.broker.unsubscribe(stream) }
            _ = await h.lifecycle.report(
                LifecycleReport(state: .background, processID: 4_000_002), from: h.app, launched: false)
            let run = try await h.coordinator.start(.fetch, for: h.app, trigger: .scheduled, reasons: [])
            #expect(!run.launched)
            func exited(_ pid: Int32) async {
                await h.coordinator.runningAppExited(
                    ProcessSupervisor.Exit(app: h.app, processID: pid, status: nil, launched: false))
            }
            await exited(4_000_001)
            #expect(try await h.store.run(run.id)?.isRunning == true, "ended by another process's exit")
            await exited(4_000_002)
            let ended = try await h.store.run(run.id)
            #expect(
                ended?.outcome == .crashed && ended?.detail?.contains("4000002") == true, "\(String(describing: ended))"
            )

            // A process bgd launched for the app reported last (it lingers after its run): the
            // run is still the one the user runs, and its exit ends it.
            _ = await h.lifecycle.report(
                LifecycleReport(state: .background, processID: 4_000_003), from: h.app, launched: false)
            _ = await h.lifecycle.report(
                LifecycleReport(state: .background, processID: 4_000_004), from: h.app, launched: true)
            let next = try await h.coordinator.start(.fetch, for: h.app, trigger: .scheduled, reasons: [])
            await exited(4_000_003)
            #expect(try await h.store.run(next.id)?.outcome == .crashed)
        }
    }

    /// Events that came while a launched process was exiting, and that another process has
    /// handled since, launch nothing when the exiting one is gone. Before, the exit launched the
    /// app for events already acknowledged: a run with nothing to deliver, ended `expired`.
    @Test func eventsHandledMeanwhileLaunchNothingAtTheExit() async throws {
        try await withHarness { h in
            try await eventsArriveWhileTheFirstProcessExits(h)
            // The events are handled meanwhile (here: acknowledged outright).
            for event in try await h.store.openEvents(for: h.app) {
                try await h.store.acknowledge(upTo: event.seq, for: h.app, now: h.clock.now)
            }
            #expect(await exits(h, 2_000_000_001, .exited(0)))
            #expect(h.launcher.launches.count == 1, "launched for events already handled")
        }
    }

    /// The events noted for an exiting process's exit are kept when another process of the
    /// app starts meanwhile (here for a fetch) and ends without handling them: the last exit
    /// launches the app for them. (An earlier mend dropped the note at that start, and they
    /// waited for the next transfer's end.)
    @Test func eventsNotedForAnExitOutliveAProcessThatDoesNotHandleThem() async throws {
        try await withHarness { h in
            try await eventsArriveWhileTheFirstProcessExits(h)
            _ = try await h.coordinator.start(.fetch, for: h.app, trigger: .scheduled, reasons: [])
            #expect(h.launcher.launches.count == 2)
            #expect(await exits(h, 2_000_000_002, .signalled(11)))  // the fetch's process crashes
            #expect(await exits(h, 2_000_000_001, .exited(0)))
            #expect(h.launcher.launches.count == 3, "not launched for the events left open")
        }
    }

    /// The harness's app is launched for a transfer's events and handles them (that process,
    /// the first launch, is told to exit); another transfer ends while it is exiting.
    private func eventsArriveWhileTheFirstProcessExits(_ h: Harness) async throws {
        try await finishATransfer(of: h)
        await h.coordinator.deliverEvents(to: h.app)
        await h.coordinator.eventsAcknowledged(by: h.app, openRemaining: 0)
        try await finishATransfer(of: h)
        await h.coordinator.deliverEvents(to: h.app)
    }

    /// Process `pid` exits with `status`; true once the supervisor (and so the coordinator,
    /// which it tells first) is done with it.
    private func exits(_ h: Harness, _ pid: Int32, _ status: BackgroundDaemon.ExitStatus) async -> Bool {
        h.launcher.exit(pid, status)
        return await until { await h.supervisor.phase(of: pid) == nil }
    }

    /// A run launched for transfer events whose events then expire unacknowledged (the app was
    /// away past their retention) has nothing left to deliver: the pruning pass that closes them
    /// ends it `cancelled` and tells its process to exit, as the last acknowledgement would.
    /// Before, it sat out its 30 s budget and ended `expired`, blaming the app.
    @Test func anEventsRunWhoseEventsExpireEndsAtOnce() async throws {
        try await withHarness { h in
            try await finishATransfer(of: h)
            h.clock.advance(by: .seconds(31 * 86400))
            await h.coordinator.deliverEvents(to: h.app)
            let run = try #require(try await h.store.runs(of: h.app).first)
            #expect(run.trigger == .transferEvents && run.isRunning)
            let told = try await pruneOnce(h)
            #expect(told == [0])
            // The clock has not moved: ended by the pass, not by its budget.
            #expect(await until { (try? await h.store.run(run.id)?.outcome) == .cancelled })
            let ended = try #require(try await h.store.run(run.id))
            #expect(ended.detail == "its transfer events expired unacknowledged" && ended.endedAt == h.clock.now)
            #expect(await firstLaunchIsToldToExit(h))
        }
    }

    /// The same run with a newer event still open goes on: it has that one to deliver.
    @Test func anEventsRunWithEventsLeftGoesOnWhenOlderOnesExpire() async throws {
        try await withHarness { h in
            try await finishATransfer(of: h)
            h.clock.advance(by: .seconds(31 * 86400))
            try await finishATransfer(of: h)
            await h.coordinator.deliverEvents(to: h.app)
            let run = try #require(try await h.store.runs(of: h.app).first)
            let told = try await pruneOnce(h)
            #expect(told.count == 1 && told[0] > 0, "\(told)")
            #expect(try await h.store.run(run.id)?.isRunning == true)
        }
    }

    /// Whether the harness's first launch was told to exit and is ended after the 5 s linger.
    private func firstLaunchIsToldToExit(_ h: Harness) async -> Bool {
        await h.supervisor.phase(of: 2_000_000_001)
            == .exitRequested(terminateAt: h.clock.elapsed + .seconds(5), killGrace: .seconds(5))
    }

    /// A transfer of the harness's app ends now (cancelled): its events wait in the outbox.
    private func finishATransfer(of h: Harness) async throws {
        let request = TransferRequest(session: "s", url: URL(string: "http://127.0.0.1:9/f")!)
        let transfer = try await h.store.createTransfer(request, app: h.app, now: h.clock.now) { id in
            (partial: "/nonexistent/\(id).partial", destination: nil)
        }
        _ = try await h.store.finishTransfer(transfer.record.id, .cancelled, now: h.clock.now)
    }

    /// Makes one pass of the real pruner (30 days' retention), wired to the coordinator as
    /// bgd wires it, and returns the open counts it told the coordinator of.
    private func pruneOnce(_ h: Harness) async throws -> [Int] {
        let told = Mutex<[Int]>([])
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let pruner = HistoryPruner(
            store: h.store, configuration: .init(), clock: h.clock,
            eventsExpired: { [coordinator = h.coordinator] app, openRemaining in
                told.withLock { $0.append(openRemaining) }
                await coordinator.eventsExpired(for: app, openRemaining: openRemaining)
            }, logger: logger)
        // A pass that fails throws here, rather than leaving the test waiting for one that ends.
        try await pruner.pass()
        return told.withLock { $0 }
    }

    /// An app that crashes on its transfer events is not launched again at every transfer's end:
    /// twice at once, then after a wait (a minute, doubling); the events wait for it, and a
    /// timer brings them back.
    @Test func anAppThatCrashesOnItsEventsIsLaunchedForThemAtAPace() async throws {
        try await withHarness { h in
            try await finishATransfer(of: h)
            for launch in 1...3 {
                await h.coordinator.deliverEvents(to: h.app)
                #expect(h.launcher.launches.count == launch)
                let run = try #require(try await h.store.runs(of: h.app).first)
                h.launcher.exit(2_000_000_000 + Int32(launch), .signalled(11))
                #expect(await until { (try? await h.store.run(run.id)?.outcome) == .crashed })
                h.clock.advance(by: .seconds(1))
            }
            // Three crashes in a row: every further ending of a transfer waits.
            let crashedAt = h.clock.now.addingTimeInterval(-1)
            for _ in 0..<20 { await h.coordinator.deliverEvents(to: h.app) }
            #expect(h.launcher.launches.count == 3)
            h.clock.advance(to: crashedAt.addingTimeInterval(59))
            #expect(h.launcher.launches.count == 3)
            h.clock.advance(to: crashedAt.addingTimeInterval(60))
            #expect(await until { h.launcher.launches.count == 4 }, "a minute after the third crash")
            let run = try #require(try await h.store.runs(of: h.app).first)
            #expect(run.trigger == .transferEvents && run.reasons.first?.code == .transferEventsWaiting)
        }
    }

    /// The wall clock set back a day after the third crash: the events still wait a minute of
    /// time that passes, once. Before, each look at the wait found "a minute from now" again,
    /// and the events waited until the wall clock came back to the crash.
    @Test func aClockSetBackDoesNotPutTheEventsOffAgainAndAgain() async throws {
        try await withHarness { h in
            try await finishATransfer(of: h)
            for launch in 1...3 {
                await h.coordinator.deliverEvents(to: h.app)
                let run = try #require(try await h.store.runs(of: h.app).first)
                h.launcher.exit(2_000_000_000 + Int32(launch), .signalled(11))
                #expect(await until { (try? await h.store.run(run.id)?.outcome) == .crashed })
            }
            h.clock.jump(by: .seconds(-86400))
            for _ in 0..<20 { await h.coordinator.deliverEvents(to: h.app) }
            h.clock.advance(by: .seconds(59))
            #expect(h.launcher.launches.count == 3)
            h.clock.advance(by: .seconds(1))
            #expect(await until { h.launcher.launches.count == 4 }, "a minute after, the wall clock notwithstanding")
        }
    }
}
