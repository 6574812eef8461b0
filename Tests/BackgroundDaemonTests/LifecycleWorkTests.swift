import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The work bgd gives an app it holds in the background — runs, transfer events — holds its
/// suspension off until each is done, whenever it was given, and leaves it its time afresh.
extension LifecycleTests {
    /// Returns once an enforcement pass has looked at `app` after `trigger`, and decided: a
    /// pass decides on the app as it is after its check, and passes run one after another, so
    /// a second check means the first pass is over.
    func afterAPass(_ lifecycle: LifecycleSupervisor, of app: AppID, _ trigger: () async -> Void) async -> Bool {
        let checks = Mutex(0)
        await lifecycle.interleave { point, checked in
            if point == .checking && checked == app { checks.withLock { $0 += 1 } }
        }
        await trigger()
        checks.withLock { $0 = 0 }
        let nobody = AppID(rawValue: "com.example.nobody")!
        await lifecycle.opened(nobody)  // rings the enforcer
        var passed = await eventually { checks.withLock { $0 } >= 1 }
        if passed {
            await lifecycle.opened(nobody)
            passed = await eventually { checks.withLock { $0 } >= 2 }
        }
        await lifecycle.interleave(nil)
        return passed
    }

    /// A bgd with the app registered (never woken), served while `body` runs: its token, its
    /// lifecycle supervisor, its id.
    func withRegisteredApp(
        _ body: @Sendable (TestDaemon, String, LifecycleSupervisor, AppID) async throws -> Void
    ) async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            try await body(daemon, token, daemon.daemon.lifecycle, AppID(rawValue: Self.app)!)
        }
    }

    /// A process of the app's that has not said its state yet (a child of the test's, in a
    /// session of its own).
    func unreportedProcess(in daemon: TestDaemon) throws -> LaunchedProcess {
        try ProcessLauncher().launch(
            LaunchSpec(
                command: LaunchCommand(["/bin/sleep", "600"])!, environment: ["PATH": "/usr/bin:/bin"],
                workingDirectory: daemon.directory, logFile: daemon.directory + "/unreported.log"))
    }

    /// Transfer events wait for the app when one of its runs ends: it is not frozen until they
    /// are handled too. Before, any run's end took the app for done.
    @Test func transferEventsKeepTheAppRunningAfterARunEnds() async throws {
        try await withAppInTheBackground { daemon, app, lifecycle, id in
            await lifecycle.workStarted(for: id, run: nil)
            await lifecycle.workStarted(for: id, run: RunID(rawValue: 41))
            await lifecycle.workEnded(for: id, run: RunID(rawValue: 41))
            let passed = await afterAPass(lifecycle, of: id) { daemon.clock.advance(by: .seconds(6)) }
            #expect(passed)
            #expect(!isSuspended(app.process.processID), "frozen with transfer events waiting")
            await lifecycle.workEnded(for: id, run: nil)
            _ = try await waitForSuspension(daemon) { daemon.clock.advance(by: .seconds(5)) }
            #expect(await app.settlesSuspended())
        }
    }

    /// A run given to the app before it said its state holds suspension off all the same, and
    /// a task it began then is still its own once it says it. Before, both were lost at its
    /// first report: it was frozen mid-run, and holding what it thought it held.
    @Test func whatCameBeforeTheFirstReportCounts() async throws {
        try await withRegisteredApp { daemon, _, lifecycle, id in
            let process = try unreportedProcess(in: daemon)
            defer { process.signalGroup(SIGKILL) }
            guard
                case .success(let grant) = await lifecycle.beginTask(
                    named: "save", for: id, launched: false, caller: process.processID)
            else {
                Issue.record("no task")
                return
            }
            await lifecycle.workStarted(for: id, run: RunID(rawValue: 42))
            _ = await lifecycle.report(
                LifecycleReport(state: .background, processID: process.processID), from: id, launched: false)
            #expect(await lifecycle.status(of: id)?.tasks.map(\.id) == [grant.id], "the task began before stands")
            #expect(await lifecycle.endTask(grant.id, for: id))
            let passed = await afterAPass(lifecycle, of: id) { daemon.clock.advance(by: .seconds(6)) }
            #expect(passed)
            #expect(!isSuspended(process.processID), "frozen mid-run")
            await lifecycle.workEnded(for: id, run: RunID(rawValue: 42))
            _ = try await waitForSuspension(daemon) { daemon.clock.advance(by: .seconds(5)) }
            #expect(await eventually { isSuspended(process.processID) })
        }
    }

    /// An app holding a task whose background time ran out during a run is left the expiration
    /// lead when the run ends (and told so): warned, then ended, on the usual schedule. Before,
    /// it was ended at the run's end at once, warned with no time left. One with time left keeps
    /// its deadline: work bgd gives it renews nothing.
    @Test func aRunsEndLeavesTheAppTheExpirationLeadAndNoMore() async throws {
        try await withAppHoldingATask { daemon, app, id, lifecycle in
            let deadline = try #require(await lifecycle.status(of: id)?.deadline)
            await lifecycle.workStarted(for: id, run: RunID(rawValue: 43))
            daemon.clock.advance(by: .seconds(10))
            await lifecycle.workEnded(for: id, run: RunID(rawValue: 43))
            #expect(await lifecycle.status(of: id)?.deadline == deadline, "time left: the deadline stands")

            await lifecycle.workStarted(for: id, run: RunID(rawValue: 44))
            let busyPass = await afterAPass(lifecycle, of: id) { daemon.clock.advance(by: .seconds(30)) }
            #expect(busyPass)
            #expect(!app.log.contains("expire-task"), "busy with the run: not warned")
            let endPass = await afterAPass(lifecycle, of: id) {
                await lifecycle.workEnded(for: id, run: RunID(rawValue: 44))
            }
            #expect(endPass)
            let status = await lifecycle.status(of: id)
            #expect(status?.reason?.code != .backgroundTimeOverrun, "\(String(describing: status?.reason))")
            #expect(app.state != nil, "ended at the run's end")
            #expect(status?.deadline == daemon.clock.now.addingTimeInterval(5), "\(String(describing: status))")
            #expect(await app.logs("expire-task"), "warned, with the lead to end its task")
            let reason = try await waitForOverrun(daemon) { daemon.clock.advance(by: .seconds(5)) }
            #expect(reason.code == .backgroundTimeOverrun)
        }
    }

    /// The app acknowledges its transfer events while a run's event is still open: it is done
    /// with them, and may be suspended (the run's own end is counted by the run). Before, only
    /// an acknowledgement that left no event at all open said so, and the app stayed awake.
    @Test func anAppIsDoneWithTransferEventsOnceTheyAreAcknowledged() async throws {
        try await withRegisteredApp { daemon, token, lifecycle, id in
            let process = try unreportedProcess(in: daemon)
            defer { process.signalGroup(SIGKILL) }
            _ = await lifecycle.report(
                LifecycleReport(state: .background, processID: process.processID), from: id, launched: false)
            // A transfer that failed (its events: transferCompleted, sessionEventsFinished), and a
            // run of the app's whose event stays open.
            let transfer = try await daemon.store.createTransfer(
                TransferRequest(session: "s", url: URL(string: "http://127.0.0.1:9/x")!), app: id,
                now: daemon.clock.now
            ) { ("\(daemon.directory)/\($0).partial", nil) }
            _ = try await daemon.store.finishTransfer(
                transfer.record.id, .failed(TransferError(.httpError, "404"), statusCode: 404), now: daemon.clock.now)
            _ = try await daemon.store.startRun(
                .fetch, for: id, trigger: .manual, reasons: [], budget: .seconds(30), now: daemon.clock.now)
            await lifecycle.workStarted(for: id, run: nil)
            for event in try await daemon.store.openEvents(for: id) where event.run == nil {
                let answer = try await RawHTTP.request(
                    daemon.socketPath, .POST, "/v1/app/events/ack",
                    body: try WireCoding.makeEncoder().encode(EventAcknowledgement(seq: event.seq, only: true)),
                    token: token)
                #expect(answer.status == 200 || answer.status == 204, "\(answer.status)")
            }
            #expect(try await daemon.store.openEventCount(for: id) == 1, "the run's event is open")
            _ = try await waitForSuspension(daemon) { daemon.clock.advance(by: .seconds(6)) }
            #expect(await eventually { isSuspended(process.processID) })
        }
    }

    /// bgd launches the app while the user's instance lives (its stream down a moment): the
    /// launched process's report does not take the app's record over. Before, it did, and the
    /// user's instance went untracked — never suspended, its exit unheard.
    @Test func aLaunchedProcessDoesNotTakeTheUsersRecordOver() async throws {
        try await withRegisteredApp { daemon, _, lifecycle, id in
            let user = try unreportedProcess(in: daemon)
            defer { user.signalGroup(SIGKILL) }
            let launched = try unreportedProcess(in: daemon)
            defer { launched.signalGroup(SIGKILL) }
            _ = await lifecycle.report(
                LifecycleReport(state: .background, processID: user.processID), from: id, launched: false)
            let status = await lifecycle.report(
                LifecycleReport(state: .background, processID: launched.processID), from: id, launched: true)
            #expect(status.processID == launched.processID && status.state == .background)
            #expect(await lifecycle.status(of: id)?.processID == user.processID, "the user's instance is tracked")
        }
    }

    /// Tasks a process began before it said its state, which then went away without a word,
    /// are not the next process's: held, they would have it ended at the end of its time.
    @Test func tasksAnotherProcessBeganAreNotTakenOver() async throws {
        try await withRegisteredApp { daemon, _, lifecycle, id in
            let next = try unreportedProcess(in: daemon)
            defer { next.signalGroup(SIGKILL) }
            guard case .success = await lifecycle.beginTask(named: "gone", for: id, launched: false, caller: 999_999)
            else {
                Issue.record("no task")
                return
            }
            _ = await lifecycle.report(
                LifecycleReport(state: .background, processID: next.processID), from: id, launched: false)
            #expect(await lifecycle.status(of: id)?.tasks.isEmpty == true, "another process's task taken over")
        }
    }
}
