import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Synchronization
import Testing

/// What arrives while the lifecycle enforcer waits on another actor — asking whether a process
/// can be suspended, freezing it (up to a second for a cgroup) — must count: the enforcer decides
/// on the app as it is after the wait, not as it was before. The waits are made to carry the
/// arrival (`LifecycleSupervisor.interleave`); the app is the real fixture process.
extension LifecycleTests {
    /// The fixture, registered and run by the user, in the background with its task ended: the
    /// next enforcement pass after the delay suspends it.
    func startInBackgroundWithNothingToDo(in daemon: TestDaemon) async throws -> Foreground {
        let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
        let app = try await startForeground("finish", in: daemon, token: token)
        #expect(await app.logs("ending 1"))
        // bgd has heard it: the log line comes before the request.
        let lifecycle = daemon.daemon.lifecycle
        #expect(await eventuallyAsync { await lifecycle.status(of: AppID(rawValue: Self.app)!)?.tasks.isEmpty == true })
        return app
    }

    /// The user opens the app while bgd freezes it: the freeze is undone, not left in place with
    /// the user looking at a hung app, and the usual delay starts again.
    @Test func anOpenWhileTheAppIsBeingFrozenLeavesItRunning() async throws {
        try await TestDaemon.with { daemon in
            let app = try await startInBackgroundWithNothingToDo(in: daemon)
            defer { app.stop() }
            let lifecycle = daemon.daemon.lifecycle
            let opens = Mutex(0)
            await lifecycle.interleave { point, id in
                guard point == .freezing, opens.withLock({ $0 }) == 0 else { return }
                opens.withLock { $0 += 1 }
                await lifecycle.opened(id)
            }
            let feed = daemon.activity.subscribe()
            daemon.clock.advance(by: .seconds(5))
            #expect(await eventually { opens.withLock { $0 } == 1 }, "bgd froze it, and the open came meanwhile")
            #expect(await eventually { !isSuspended(app.process.processID) }, "thawed once the freeze returned")
            #expect(await lifecycle.status(of: AppID(rawValue: Self.app)!)?.state == .background)
            var first: (ApplicationState, ReasonCode)?
            for await activity in feed {
                if case .lifecycleChanged(let changed, let state, let reason?) = activity, changed.rawValue == Self.app
                {
                    first = (state, reason.code)
                    break
                }
            }
            #expect(first?.0 == .background && first?.1 == .resumedForOpen, "never said to be suspended")
            guard first?.1 == .resumedForOpen else { return }
            // The open restarted its time: suspended after the usual delay, and for good this time.
            await lifecycle.interleave(nil)
            _ = try await waitForSuspension(daemon) { daemon.clock.advance(by: .seconds(5)) }
            #expect(await app.settlesSuspended())
        }
    }

    /// The app comes to the foreground while bgd checks it, just as its background time runs out
    /// holding a task: it is not ended.
    @Test func anAppThatComesToTheForegroundAsItsTimeRunsOutIsNotEnded() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            let app = try await startForeground("ignore", in: daemon, token: token)
            defer { app.stop() }
            let id = AppID(rawValue: Self.app)!
            _ = try await daemon.waitFor(
                { activity -> Bool? in
                    if case .backgroundTimeExpiring(let expiring, _) = activity, expiring == id { return true }
                    return nil
                }, after: { daemon.clock.advance(by: .seconds(25)) })
            let lifecycle = daemon.daemon.lifecycle
            let checks = Mutex(0)
            let pid = app.process.processID
            await lifecycle.interleave { point, checked in
                guard point == .checking, checked == id else { return }
                if checks.withLock({
                    $0 += 1; return $0
                }) == 1 {
                    _ = await lifecycle.report(
                        LifecycleReport(state: .active, processID: pid), from: id, launched: false)
                }
            }
            daemon.clock.advance(by: .seconds(5))
            // The report rings the enforcer again: a second check means the first pass is over.
            #expect(await eventually { checks.withLock { $0 } >= 2 })
            await lifecycle.interleave(nil)
            let status = await lifecycle.status(of: id)
            #expect(status?.state == .active)
            #expect(status?.reason?.code != .backgroundTimeOverrun, "\(String(describing: status?.reason))")
            #expect(app.state != nil && !isSuspended(pid), "neither ended nor frozen")
        }
    }

    /// The app says it is `active` while bgd freezes it, and an event comes too: it stays
    /// `active` (and thawed), not put back in the background by the event calling the freeze off.
    @Test func anAppThatComesToTheForegroundWhileBeingFrozenStaysThere() async throws {
        try await withAppInTheBackground { daemon, app, lifecycle, id in
            let pid = app.process.processID
            let arrivals = Mutex(0)
            await lifecycle.interleave { point, frozen in
                guard point == .freezing,
                    arrivals.withLock({
                        $0 += 1; return $0
                    }) == 1
                else { return }
                _ = await lifecycle.report(
                    LifecycleReport(state: .active, processID: pid), from: frozen, launched: false)
                await lifecycle.workStarted(for: frozen, run: nil)
            }
            daemon.clock.advance(by: .seconds(5))
            #expect(await eventually { arrivals.withLock { $0 } == 1 })
            #expect(await eventually { !isSuspended(pid) }, "thawed once the freeze returned")
            await lifecycle.interleave(nil)
            #expect(await lifecycle.status(of: id)?.state == .active)
            #expect(await lifecycle.appInForeground == id)
        }
    }

    /// Runs `body` with the fixture in the background with nothing to do (suspended once the
    /// delay is over), and bgd's lifecycle supervisor.
    func withAppInTheBackground(
        _ body: @Sendable (TestDaemon, Foreground, LifecycleSupervisor, AppID) async throws -> Void
    ) async throws {
        try await TestDaemon.with { daemon in
            let app = try await startInBackgroundWithNothingToDo(in: daemon)
            defer { app.stop() }
            try await body(daemon, app, daemon.daemon.lifecycle, AppID(rawValue: Self.app)!)
        }
    }

    /// Runs `body` with the fixture suspended by bgd (frozen in its cgroup, or stopped).
    func withSuspendedApp(
        _ body: @Sendable (TestDaemon, Foreground, LifecycleSupervisor, AppID) async throws -> Void
    ) async throws {
        try await withAppInTheBackground { daemon, app, lifecycle, id in
            _ = try await waitForSuspension(daemon) { daemon.clock.advance(by: .seconds(5)) }
            #expect(await app.settlesSuspended())
            try await body(daemon, app, lifecycle, id)
        }
    }

    /// A report bgd handles after it froze the app was sent before the freeze (a frozen process
    /// sends nothing). `background` changes nothing; `active` — the user brought it to the front
    /// as bgd froze it — thaws it. Before, it was recorded `active` and stayed frozen for good,
    /// holding every processing task back.
    @Test func aReportSentBeforeTheFreezeCountsOnlyIfItSaysActive() async throws {
        try await withSuspendedApp { daemon, app, lifecycle, id in
            let pid = app.process.processID
            _ = await lifecycle.report(LifecycleReport(state: .background, processID: pid), from: id, launched: false)
            #expect(await lifecycle.status(of: id)?.state == .suspended && isSuspended(pid), "a stale background")
            _ = await lifecycle.report(LifecycleReport(state: .active, processID: pid), from: id, launched: false)
            #expect(await lifecycle.status(of: id)?.state == .active)
            #expect(await eventually { !isSuspended(pid) }, "thawed")
            #expect(await lifecycle.appInForeground == id)
        }
    }

    /// A new instance of the app reports while the old one is frozen: the old one is thawed — no
    /// longer bgd's to hold, and nothing else would ever thaw it — and the new one starts with
    /// none of the old one's tasks.
    @Test func aNewInstanceReportingThawsTheOldOne() async throws {
        try await withSuspendedApp { daemon, app, lifecycle, id in
            let newer = try Spawned("/bin/sleep", ["1000"])
            defer { newer.signal(SIGKILL) }
            let status = await lifecycle.report(
                LifecycleReport(state: .background, processID: newer.processID), from: id, launched: false)
            #expect(status.state == .background && status.processID == newer.processID, "\(status)")
            #expect(await eventually { !isSuspended(app.process.processID) }, "the old instance is thawed")
            // Its own background time, not what was left of the old one's.
            let deadline = try #require(status.deadline)
            #expect(abs(deadline.timeIntervalSince(daemon.clock.now) - 30) < 1, "\(deadline)")
        }
    }

    /// A suspension the store cannot write down (a full disk) is tried again once it can, not
    /// left until something unrelated rings the enforcer (before, the app ran on unsuspended).
    @Test func aSuspensionTheDiskRefusedIsTriedAgain() async throws {
        let disk = FullDiskTests()
        try await disk.withVolume(size: "4m") { directory in
            try await TestDaemon.with(directory: directory) { daemon in
                let app = try await startInBackgroundWithNothingToDo(in: daemon)
                defer { app.stop() }
                let filler = try await disk.fillUp(directory + "/state", socket: daemon.socketPath)
                let checks = Mutex(0)
                await daemon.daemon.lifecycle.interleave { point, _ in
                    if point == .checking { checks.withLock { $0 += 1 } }
                }
                daemon.clock.advance(by: .seconds(5))  // its suspension is due, and cannot be written
                #expect(await eventually { checks.withLock { $0 } == 1 })
                // Nothing else happens; bgd looks again by itself, within the retry's time.
                #expect(
                    await eventuallyAsync {
                        daemon.clock.advance(by: .seconds(1))
                        return checks.withLock { $0 } >= 2
                    })
                #expect(!isSuspended(app.process.processID), "the disk is still full")
                await daemon.daemon.lifecycle.interleave(nil)
                unlink(filler)
                // Space again: suspended at the next try (or at the one under way as space came).
                #expect(
                    await eventuallyAsync {
                        daemon.clock.advance(by: .seconds(1))
                        return isSuspended(app.process.processID)
                    })
            }
        }
    }
}
