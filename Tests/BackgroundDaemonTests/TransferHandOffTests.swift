import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundPolicy
import BackgroundTesting
import Foundation
import GRDB
import Testing

/// A download handed to bgd for an app that is not running: bgd finishes it, launches the app
/// with reason url-session and delivers the events in iOS's order, until acknowledged.
@Suite(.timeLimit(.minutes(5)))
struct TransferHandOffTests {
    static let app = "com.example.downloads"

    func fixture(_ behaviour: String) throws -> [String] { [try BuiltProducts.path(of: "bgd-fixture-app"), behaviour] }

    func log(_ daemon: TestDaemon) -> [String] {
        let path = daemon.directory + "/state/containers/\(Self.app)/fixture.log"
        return ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    /// Submits a download for the app and waits until the process bgd launched for its events exits.
    func handOver(_ url: URL, daemon: TestDaemon) async throws -> TransferRecord {
        var activities = daemon.activity.subscribe().makeAsyncIterator()
        let record = try await daemon.admin.send(
            .post, "/v1/transfers?app=\(Self.app)",
            body: TransferRequest(session: "fixture", url: url, taskDescription: "the image"),
            as: TransferRecord.self)
        var ended = false
        while let activity = await activities.next() {
            if case .transferEnded(let done) = activity, done.id == record.id { ended = true }
            if case .processExited(let app, _, _) = activity, app.rawValue == Self.app, ended { break }
        }
        return record
    }

    @Test func theAppIsLaunchedAndSeesTheEventsInOrder() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with { daemon in
            try await daemon.register(Self.app, command: try fixture("newData"), interval: .never)
            // The server suggests a name that climbs out of the container: it is never used.
            let record = try await handOver(
                origin.url(seed: 21, size: 500_000, faults: ["disposition": "../../../evil.sh"]), daemon: daemon)
            let digest = FaultyOrigin.sha256(seed: 21, size: 500_000)
            #expect(
                log(daemon) == [
                    "handleEvents fixture", "finished \(record.id) \(digest)", "completed \(record.id) ok",
                    "eventsFinished fixture",
                ])
            // The app moved the file; bgd's hand-off place is empty; every event acknowledged.
            #expect(
                FileManager.default.fileExists(
                    atPath: daemon.directory + "/state/containers/\(Self.app)/kept-\(record.id)"))
            let outbox = try await daemon.store.outbox(for: AppID(rawValue: Self.app)!)
            #expect(outbox.count == 3 && outbox.allSatisfy { $0.closedBy == "app" }, "\(outbox)")
            let everything = FileManager.default.enumerator(atPath: daemon.directory)?.allObjects as? [String] ?? []
            #expect(!everything.contains { $0.hasSuffix("evil.sh") }, "\(everything)")
            // The launch is a run of its own — not a fetch — ended once every event was acknowledged.
            let launches = try await daemon.admin.send(.get, "/v1/apps/\(Self.app)/history", as: [RunRecord].self)
            #expect(
                launches.map(\.trigger) == [.transferEvents] && launches.map(\.outcome) == [.eventsHandled],
                "\(launches)")
            #expect(
                launches.first?.launched == true && launches.first?.reasons.first?.code == .transferEventsWaiting
                    && launches.first?.kind == .events)
            #expect(
                try await daemon.admin.send(.get, "/v1/apps/\(Self.app)/why", as: WakeExplanation.self).nextWake == nil,
                "it plans no fetch")
        }
    }

    /// Registers the fixture as `behaviour` and hands it a download of `seed`'s bytes, which its
    /// first process (launched for the events) does not live to acknowledge; then launches it
    /// again with a fetch. The transfer, the download's hash and the fixture's log by then.
    func downloadOutlivingItsFirstProcess(
        _ behaviour: String, seed: Int, size: Int, from origin: FaultyOrigin, daemon: TestDaemon
    ) async throws -> (record: TransferRecord, digest: String, lines: [String]) {
        try await daemon.register(Self.app, command: try fixture(behaviour), interval: .never)
        let record = try await handOver(origin.url(seed: seed, size: size), daemon: daemon)
        let digest = FaultyOrigin.sha256(seed: seed, size: size)
        #expect(log(daemon) == ["handleEvents fixture", "finished \(record.id) \(digest)"])
        let ended = try await daemon.admin.send(.get, "/v1/apps/\(Self.app)/history", as: [RunRecord].self)
        #expect(ended.map(\.outcome) == [.crashed] && ended.first?.trigger == .transferEvents, "\(ended)")
        _ = try await daemon.waitForRunEnd(of: Self.app) {
            _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/fetch", as: RunRecord.self)
        }
        return (record, digest, log(daemon))
    }

    /// The app crashes inside didFinishDownloadingTo, before acknowledging: the next time it runs
    /// it gets the same events again, in order, and sees the completion once.
    @Test func anAppThatCrashesBeforeAcknowledgingGetsTheEventsAgain() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with { daemon in
            // Next launch (a fetch): the backlog first, then the fetch.
            let (record, digest, lines) = try await downloadOutlivingItsFirstProcess(
                "crash-on-download", seed: 22, size: 300_000, from: origin, daemon: daemon)
            #expect(
                Array(lines.prefix(5)) == [
                    "handleEvents fixture", "finished \(record.id) \(digest)", "finished \(record.id) \(digest)",
                    "completed \(record.id) ok", "eventsFinished fixture",
                ], "\(lines)")
            #expect(lines.filter { $0.hasPrefix("completed") }.count == 1)
        }
    }

    /// The app is killed after its delegate took the download, before its acknowledgement left
    /// (reliability-matrix D9): its next process is sent the event again, and does not hand it
    /// over twice — the library remembered it in the container. Before, the second process's
    /// delegate was handed the download again, its file gone.
    @Test func aDownloadHandledBeforeTheAppWasKilledIsNotHandedOverAgain() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with { daemon in
            // Next launch (a fetch): the download is acknowledged, not handed over again.
            let (record, digest, lines) = try await downloadOutlivingItsFirstProcess(
                "die-before-download-ack", seed: 24, size: 200_000, from: origin, daemon: daemon)
            #expect(lines.filter { $0.hasPrefix("finished") } == ["finished \(record.id) \(digest)"], "\(lines)")
            #expect(lines.contains("completed \(record.id) ok") && lines.contains("eventsFinished fixture"), "\(lines)")
            let outbox = try await daemon.store.outbox(for: AppID(rawValue: Self.app)!)
            #expect(
                outbox.filter { $0.event.kind == "downloadFinished" }.allSatisfy { $0.closedBy == "app" }, "\(outbox)")
        }
    }

    /// Registers the app (never woken) and has bgd download `seed`'s 1,000 bytes for it in a
    /// session that sends no launch events; returns once the transfer ended: its record, and the
    /// activity seen until then.
    func transferWithoutLaunchEvents(
        _ daemon: TestDaemon, from origin: FaultyOrigin, seed: Int
    ) async throws -> (record: TransferRecord, seen: [Activity]) {
        try await daemon.register(Self.app, command: try fixture("newData"), interval: .never)
        var activities = daemon.activity.subscribe().makeAsyncIterator()
        let record = try await daemon.admin.send(
            .post, "/v1/transfers?app=\(Self.app)",
            body: TransferRequest(
                session: "fixture", url: origin.url(seed: seed, size: 1000), sessionSendsLaunchEvents: false),
            as: TransferRecord.self)
        var seen: [Activity] = []
        while let activity = await activities.next() {
            seen.append(activity)
            if case .transferEnded(let ended) = activity, ended.id == record.id { break }
        }
        return (record, seen)
    }

    /// sessionSendsLaunchEvents off: bgd does not launch the app; the events wait for it.
    @Test func withoutLaunchEventsTheEventsWaitForTheApp() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with { daemon in
            let (_, seen) = try await transferWithoutLaunchEvents(daemon, from: origin, seed: 23)
            #expect(!seen.contains { if case .processLaunched = $0 { true } else { false } }, "the app was launched")
            let open = try await daemon.store.openEvents(for: AppID(rawValue: Self.app)!)
            #expect(open.map(\.kind) == ["downloadFinished", "transferCompleted", "sessionEventsFinished"])
            #expect(log(daemon).isEmpty)
            // Nor does a bgd started later launch it for them (it launched every app with
            // waiting events at each start).
            #expect(await daemon.daemon.transferService.sendsLaunchEvents(AppID(rawValue: Self.app)!) == false)
        }
    }

    /// Events an app never acknowledges do not stay for good: after `--keep-history` (30 days)
    /// the pruner closes them as expired, removes the finished download the app never claimed,
    /// and the transfer is pruned like any other. Before, they stayed open for ever, the
    /// download and the transfer with them, and the app was relaunched to take them.
    @Test func eventsTheAppNeverAcknowledgesExpireWithTheirDownload() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with { daemon in
            let app = AppID(rawValue: Self.app)!
            let (record, _) = try await transferWithoutLaunchEvents(daemon, from: origin, seed: 24)
            let open = try await daemon.store.openEvents(for: app)
            guard case .downloadFinished(_, _, _, let location)? = open.first?.body else {
                Issue.record("no downloadFinished: \(open)")
                return
            }
            #expect(FileManager.default.fileExists(atPath: location))

            // 29 days on, a pruning pass keeps them; past 30, the next one expires them.
            @discardableResult
            func prunedAfter(_ days: Int) async -> [Activity] {
                await Self.activity(of: daemon, untilPrunedAfter: { daemon.clock.advance(by: .seconds(days * 86400)) })
            }
            await prunedAfter(29)
            #expect(try await daemon.store.openEvents(for: app).count == 3)
            #expect(FileManager.default.fileExists(atPath: location))
            let pass = await prunedAfter(2)
            #expect(try await daemon.store.openEvents(for: app).isEmpty)
            #expect(pass.contains(.eventsExpired(app, events: 3, downloadsRemoved: 1)), "\(pass)")
            let metrics = try await ObservabilityTests().get0(daemon)
            let expiredTotal = metrics.split(separator: "\n").first { $0.hasPrefix("bgd_events_expired_total ") }
            #expect(
                expiredTotal.flatMap { $0.split(separator: " ").last }.flatMap { Double($0) } ?? 0 >= 3, "\(metrics)")
            let outbox = try await daemon.store.outbox(for: app)
            #expect(outbox.map(\.closedBy) == ["expired", "expired", "expired"], "\(outbox)")
            #expect(!FileManager.default.fileExists(atPath: location), "the unclaimed download is gone")
            // One a crash left after the expiry committed goes at the next pass.
            try Data("left by a crash".utf8).write(to: URL(fileURLWithPath: location))
            await prunedAfter(1)
            #expect(!FileManager.default.fileExists(atPath: location), "the next pass removes it")
            #expect(try await daemon.store.transfer(record.id) == nil, "the transfer is pruned with them")
        }
    }

    /// A run launched for transfer events ends at the pruning pass that expires them: the app
    /// was handed its download and never acknowledged it (`--keep-history` here shorter than
    /// the run's 30 s budget). It ends `cancelled`, not `expired`: nothing is left to deliver,
    /// and the app is not blamed. Before bgd wired the pruner to its runs, the run sat out its
    /// budget and ended `expired`, which counts toward the relaunch backoff.
    @Test func aRunForEventsThatExpireEndsAtThePass() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with(retention: .init(retention: .init(history: .seconds(10)))) { daemon in
            let app = AppID(rawValue: Self.app)!
            try await daemon.register(Self.app, command: try fixture("hang-on-download"), interval: .never)
            var activities = daemon.activity.subscribe().makeAsyncIterator()
            _ = try await daemon.admin.send(
                .post, "/v1/transfers?app=\(Self.app)",
                body: TransferRequest(session: "fixture", url: origin.url(seed: 26, size: 1000)),
                as: TransferRecord.self)
            var run: RunRecord?
            while run == nil, let activity = await activities.next() {
                if case .runStarted(let started) = activity, started.app == app { run = started }
            }
            let started = try #require(run)
            #expect(started.trigger == .transferEvents)

            let pass = await Self.activity(of: daemon) {
                daemon.clock.advance(by: .seconds(11))
                daemon.daemon.pruneDoorbell.ring()
            }
            #expect(pass.contains(.eventsExpired(app, events: 3, downloadsRemoved: 1)), "\(pass)")
            let ended = pass.compactMap { if case .runEnded(let run) = $0, run.id == started.id { run } else { nil } }
            #expect(ended.map(\.outcome) == [.cancelled], "the run ended at the pass: \(pass)")
            #expect(ended.first?.detail == "its transfer events expired unacknowledged")
        }
    }

    /// What the daemon does after `move` up to its next pruning pass.
    static func activity(of daemon: TestDaemon, untilPrunedAfter move: () -> Void) async -> [Activity] {
        var passes = daemon.activity.subscribe().makeAsyncIterator()
        move()
        var seen: [Activity] = []
        while let activity = await passes.next() {
            if case .historyPruned = activity { return seen }
            seen.append(activity)
        }
        return seen
    }

    /// A wall clock set forward by more than `--keep-history` — a device with no battery-backed
    /// clock, booted in the past and set right by NTP — expires nothing: the unacknowledged
    /// events were stamped by the clock that was behind, and keep the time they had. They
    /// expire once the history has really passed. Before, the next pass closed them and
    /// removed the unclaimed download at once.
    @Test func aWallClockSetForwardExpiresNothingEarly() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with { daemon in
            let app = AppID(rawValue: Self.app)!
            _ = try await transferWithoutLaunchEvents(daemon, from: origin, seed: 25)
            guard
                case .downloadFinished(_, _, _, let location)? = try await daemon.store.openEvents(for: app).first?.body
            else {
                Issue.record("no downloadFinished")
                return
            }
            // A jump wakes no timer: the pass is rung for.
            func pass(_ move: () -> Void) async -> [Activity] {
                await Self.activity(of: daemon) {
                    move()
                    daemon.daemon.pruneDoorbell.ring()
                }
            }
            // Set 40 days forward, no time passing: a pass expires nothing.
            let jumped = await pass { daemon.clock.jump(by: .seconds(40 * 86400)) }
            #expect(!jumped.contains { if case .eventsExpired = $0 { true } else { false } }, "\(jumped)")
            #expect(try await daemon.store.openEvents(for: app).count == 3)
            #expect(FileManager.default.fileExists(atPath: location), "the download was removed")
            // 31 days really pass: they expire.
            let later = await pass { daemon.clock.advance(by: .seconds(31 * 86400)) }
            #expect(later.contains(.eventsExpired(app, events: 3, downloadsRemoved: 1)), "\(later)")
        }
    }

    /// The clock is set forward during a pass the store cannot finish (carrying the events
    /// fails, a full disk say): the step is saved all the same, and a bgd started after it
    /// still ages the events by the time that passed. Before, the failed pass forgot the jump
    /// unsaved, and the next bgd's first pass expired the events and removed the download.
    @Test func aClockStepSurvivesAPassTheStoreCouldNotFinish() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        let directory = TemporaryDirectory.make()
        let clock = ManualClock()
        let app = AppID(rawValue: Self.app)!
        try await TestDaemon.with(clock: clock, directory: directory) { daemon in
            _ = try await transferWithoutLaunchEvents(daemon, from: origin, seed: 29)
            // Events cannot be written for a while: the carry fails.
            let database = try DatabaseQueue(path: directory + "/state/bgd.sqlite")
            try await database.write { db in
                try db.execute(
                    sql: "CREATE TRIGGER refuse BEFORE UPDATE ON event BEGIN SELECT RAISE(ABORT, 'disk full'); END")
            }
            _ = await Self.activity(of: daemon) {
                clock.jump(by: .seconds(40 * 86400))
                daemon.daemon.pruneDoorbell.ring()
            }
            try await database.write { db in try db.execute(sql: "DROP TRIGGER refuse") }
            try database.close()
        }
        try await TestDaemon.with(clock: clock, directory: directory) { daemon in
            let pass = await Self.activity(of: daemon) { daemon.daemon.pruneDoorbell.ring() }
            #expect(!pass.contains { if case .eventsExpired = $0 { true } else { false } }, "\(pass)")
            // None expired. (Not "all three open": under load the app is sometimes launched after
            // the jump and acknowledges the first before the first bgd stops, which is its right.)
            let outbox = try await daemon.store.outbox(for: app)
            #expect(outbox.count == 3 && outbox.allSatisfy { $0.closedBy != "expired" }, "\(outbox)")
        }
    }

    /// Apps cannot name where a download goes, nor see or cancel another app's transfers.
    @Test func appsStayInTheirOwnLane() async throws {
        try await TestDaemon.with { daemon in
            let mine = try await daemon.register(Self.app, command: try fixture("newData"), interval: .never)
            let other = try await daemon.register(
                "com.example.other", command: try fixture("newData"), interval: .never)
            let escape = #"{"session": "s", "url": "http://127.0.0.1:9/x", "destination": "/tmp/evil"}"#
            let refused = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers", body: Data(escape.utf8), token: mine.token)
            #expect(refused.status == 400 && refused.errorCode == "destinationNotAllowed")
            let body = #"{"session": "s", "url": "http://127.0.0.1:9/x"}"#
            let created = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers", body: Data(body.utf8), token: mine.token)
            #expect(created.status == 201)
            let id = try #require(created.json["id"] as? Int)
            for (method, path) in [("GET", "/v1/app/transfers/\(id)"), ("DELETE", "/v1/app/transfers/\(id)")] {
                let answer = try await RawHTTP.request(
                    daemon.socketPath, .init(rawValue: method), path, token: other.token)
                #expect(answer.status == 404 && answer.errorCode == "unknownTransfer", "\(method) \(path)")
            }
            let list = try await RawHTTP.request(daemon.socketPath, .GET, "/v1/app/transfers", token: other.token)
            #expect(String(decoding: list.body, as: UTF8.self) == "[]")
            let unauthenticated = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers", body: Data(body.utf8))
            #expect(unauthenticated.status == 401)
        }
    }

    /// A launched process held a download's events and died unhandled while the app as the user
    /// runs it — connected meanwhile — had handled later events (a download of its own): the events come to
    /// the app after that later one, and are handed to its session. Before, the library took
    /// anything below the highest event it had handled for handled, and acknowledged them
    /// unhandled: the download was lost.
    @Test func anEarlierEventLeftByADeadProcessReachesTheRunningApp() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register(
                Self.app, command: try fixture("hang-on-download"), interval: .never)
            let pid = try await daemon.waitFor({ if case .processLaunched(_, let pid) = $0 { pid } else { nil } }) {
                _ = try await daemon.admin.send(
                    .post, "/v1/transfers?app=\(Self.app)",
                    body: TransferRequest(session: "fixture", url: origin.url(seed: 27, size: 1000)),
                    as: TransferRecord.self)
            }
            #expect(await eventually { log(daemon).contains { $0.hasPrefix("finished") } }, "\(log(daemon))")

            // The user opens the app, and downloads a file: its events come after the first download's.
            let application = BackgroundApplication(
                appID: AppID(rawValue: Self.app)!, token: registered.token, socketPath: daemon.socketPath)
            let delegate = LocationRecorder()
            let session = BackgroundURLSession(
                configuration: .background(withIdentifier: "fixture"), delegate: delegate, application: application)
            _ = session
            var connection: Task<Void, any Error>?
            defer { connection?.cancel() }
            try await daemon.waitFor({ if case .appConnected = $0 { () } else { nil } }) {
                connection = Task { try await application.run() }
            }
            let (file, _) = try await session.download(from: origin.url(seed: 28, size: 1000))
            #expect(
                FaultyOrigin.sha256Digest(of: try Data(contentsOf: file)) == FaultyOrigin.sha256(seed: 28, size: 1000))

            // The launched process dies with the download unhandled: the app's session gets it.
            kill(pid, SIGKILL)
            #expect(await eventually { delegate.seen.withLock { $0.count } == 1 }, "handed to the running app")
            let outbox = try await daemon.store.outbox(for: AppID(rawValue: Self.app)!)
            #expect(
                try await eventuallyAsync {
                    try await daemon.store.outbox(for: AppID(rawValue: Self.app)!).allSatisfy { $0.closedBy == "app" }
                }, "\(outbox)")
        }
    }

}
