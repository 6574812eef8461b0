import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Testing

/// Pruning on a real SQLite file: finished, old work goes in small transactions; nothing an app
/// or a provider still waits for is ever deleted; the file gives its pages back.
struct RetentionTests {
    let t0 = Date(timeIntervalSince1970: 1_767_603_600)
    let day = 86400.0
    let a = AppID(rawValue: "com.example.a")!
    let b = AppID(rawValue: "com.example.b")!

    func openStore() throws -> BackgroundStore {
        try BackgroundStore.open(atPath: TemporaryDirectory.make() + "/bgd.sqlite", durability: .normal)
    }

    func register(_ id: AppID, in store: BackgroundStore) async throws {
        _ = try await store.register(
            RegisterAppRequest(id: id, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum),
            tokenHash: "hash-\(id)", now: t0)
    }

    /// `count` finished fetch runs of app `a`, ten minutes apart from `t0`, each with a reason of
    /// `words` words (to fill pages).
    func finishRuns(_ count: Int, saying words: Int, in store: BackgroundStore) async throws {
        let reasons = [DecisionReason(.predictedOpen, String(repeating: "why ", count: words))]
        for i in 0..<count {
            let start = t0.addingTimeInterval(Double(i) * 600)
            let run = try await store.startRun(
                .fetch, for: a, trigger: .scheduled, reasons: reasons, budget: .seconds(30), now: start)
            _ = try await store.finishRun(run.id, outcome: .newData, now: start.addingTimeInterval(10))
        }
    }

    func push(_ number: Int, for app: AppID) -> NewPush {
        NewPush(
            app: app, apnsID: String(format: "00000000-0000-0000-0000-%012d", number), pushType: "background",
            priority: 5, collapseID: nil, expiration: nil, payload: Data(#"{"n":\#(number)}"#.utf8))
    }

    @Test func finishedOldWorkGoesAndWhatIsWaitedForStays() async throws {
        let store = try openStore()
        try await register(a, in: store)
        try await register(b, in: store)
        // Thirty finished fetches of A on the first day (each with its event, closed at the end).
        for i in 0..<30 {
            let start = t0.addingTimeInterval(Double(i) * 600)
            let run = try await store.startRun(
                .fetch, for: a, trigger: .scheduled, reasons: [], budget: .seconds(30), now: start)
            _ = try await store.finishRun(run.id, outcome: .newData, now: start.addingTimeInterval(10))
        }
        // B's run never ended: it and its event are still waited for, however old.
        let inFlight = try await store.startRun(
            .fetch, for: b, trigger: .scheduled, reasons: [], budget: .seconds(30), now: t0)
        // Five pushes for B: three dropped (settled), two still queued.
        try await store.enqueuePushes((0..<5).map { push($0, for: b) }, now: t0)
        for stored in try await store.pushes(of: b).prefix(3) {
            try await store.dropPush(stored.id, reason: DecisionReason(.pushUndeliverable, "test"))
        }
        // Opens: one on the first day, one on day 35.
        try await store.recordOpen(of: a, at: t0)
        try await store.recordOpen(of: a, at: t0.addingTimeInterval(35 * day))

        let retention = BackgroundStore.Retention(
            history: .seconds(30 * 86400), opens: .seconds(30 * 86400), runsKeptPerApp: 5)
        let now = t0.addingTimeInterval(40 * day)
        let report = try await store.prune(retention, now: now, batch: 7)
        #expect(report.runs == 25, "the latest 5 of A's 30 stay")
        #expect(report.events == 30, "every closed event of A")
        #expect(report.pushes == 3)
        #expect(report.opens == 1)

        #expect(try await store.runs(of: a, limit: 100).count == 5)
        #expect(try await store.runs(of: a, limit: 100).map(\.startedAt).min() == t0.addingTimeInterval(25 * 600))
        #expect(try await store.runsInFlight().map(\.id) == [inFlight.id])
        #expect(try await store.openEvents(for: b).count == 1, "B's event is not acknowledged: it stays")
        #expect(try await store.pushes(of: b).map(\.state).sorted { $0.rawValue < $1.rawValue } == [.queued, .queued])
        #expect(try await store.opens(of: a) == [t0.addingTimeInterval(35 * day)])

        // A second pass finds nothing more; the file is sound.
        #expect(try await store.prune(retention, now: now, batch: 7).rowsDeleted == 0)
        #expect(try await store.integrityCheck() == "ok")
    }

    @Test func recentWorkIsKept() async throws {
        let store = try openStore()
        try await register(a, in: store)
        for i in 0..<10 {
            let start = t0.addingTimeInterval(Double(i) * 3600)
            let run = try await store.startRun(
                .fetch, for: a, trigger: .scheduled, reasons: [], budget: .seconds(30), now: start)
            _ = try await store.finishRun(run.id, outcome: .noData, now: start.addingTimeInterval(5))
        }
        let report = try await store.prune(
            .init(history: .seconds(30 * 86400), runsKeptPerApp: 1), now: t0.addingTimeInterval(29 * day))
        #expect(report.rowsDeleted == 0)
        #expect(try await store.runs(of: a, limit: 100).count == 10)
    }

    /// A history shorter than the month of answers the fetch policy reads keeps the runs that
    /// hold them that month: `--keep-history 7d` prunes events and pushes after a week, runs
    /// after 28 days. Before, a week's history planned from a week of answers beyond the latest
    /// few.
    @Test func runsStayAsLongAsThePolicyReadsTheirAnswers() async throws {
        let store = try openStore()
        try await register(a, in: store)
        try await finishRuns(5, saying: 1, in: store)
        let week = BackgroundStore.Retention(history: .seconds(7 * 86400), runsKeptPerApp: 1)
        _ = try await store.prune(week, now: t0.addingTimeInterval(27 * day))
        #expect(try await store.runs(of: a, limit: 100).count == 5)
        _ = try await store.prune(week, now: t0.addingTimeInterval(29 * day))
        #expect(try await store.runs(of: a, limit: 100).count == 1)
    }

    /// An app's last fetch stays however many pushes woke it since: the fetch policy anchors its
    /// next fetch there. Before, the kept runs were the latest of any kind, and an app woken
    /// often for pushes lost its last fetch a month on (then fetched as if it never had).
    @Test func theLastFetchStaysAmongManyPushRuns() async throws {
        let store = try openStore()
        try await register(a, in: store)
        let fetch = try await store.startRun(
            .fetch, for: a, trigger: .scheduled, reasons: [], budget: .seconds(30), now: t0)
        _ = try await store.finishRun(fetch.id, outcome: .newData, now: t0.addingTimeInterval(5))
        for i in 1...5 {
            try await store.enqueuePushes([push(i, for: a)], now: t0)
            let queued = try #require(try await store.coalesceQueuedPushes(of: a))
            let start = t0.addingTimeInterval(Double(i) * day)
            let run = try await store.startRun(
                .push(queued.id, apnsID: queued.apnsID, payload: "{}", allowance: nil), for: a,
                trigger: .remoteNotification, reasons: [], budget: .seconds(30), now: start)
            _ = try await store.finishRun(run.id, outcome: .newData, now: start.addingTimeInterval(5))
        }
        _ = try await store.prune(
            .init(history: .seconds(30 * 86400), runsKeptPerApp: 2), now: t0.addingTimeInterval(40 * day))
        let kept = try await store.runs(of: a, limit: 100)
        #expect(kept.map(\.kind) == [.push, .push, .fetch], "\(kept.map(\.kind))")
        #expect(kept.last?.id == fetch.id)
    }

    /// The latest runs kept are the last started, not the ones stamped latest: a clock that
    /// ran a year ahead for one run must not keep that run in place of the ones after it.
    @Test func theRunsKeptAreTheLastStartedWhateverTheirStamps() async throws {
        let store = try openStore()
        try await register(a, in: store)
        var ids: [RunID] = []
        for start in [t0.addingTimeInterval(365 * day), t0] {
            let run = try await store.startRun(
                .fetch, for: a, trigger: .scheduled, reasons: [], budget: .seconds(30), now: start)
            _ = try await store.finishRun(run.id, outcome: .newData, now: start.addingTimeInterval(5))
            ids.append(run.id)
        }
        _ = try await store.prune(
            .init(history: .seconds(30 * 86400), runsKeptPerApp: 1), now: t0.addingTimeInterval(400 * day))
        #expect(try await store.runs(of: a, limit: 100).map(\.id) == [ids[1]])
    }

    @Test func theFileGivesItsPagesBack() async throws {
        let store = try openStore()
        try await register(a, in: store)
        try await finishRuns(600, saying: 200, in: store)
        let before = try await store.pageCounts()
        let report = try await store.prune(
            .init(history: .seconds(86400), runsKeptPerApp: 10), now: t0.addingTimeInterval(60 * day))
        let after = try await store.pageCounts()
        #expect(report.runs == 590)
        #expect(report.pagesFreed > 0)
        #expect(after.pages < before.pages / 2, "\(before.pages) → \(after.pages) pages")
        #expect(after.free == 0)
    }

    @Test func theWriteAheadLogShrinksBackAfterAPrune() async throws {
        // A daemon holds its connections for months: SQLite keeps the -wal file at its largest
        // until the last one closes, so without a limit the pages a prune moves stay on disk.
        let path = TemporaryDirectory.make() + "/bgd.sqlite"
        let store = try BackgroundStore.open(atPath: path, durability: .normal)
        try await register(a, in: store)
        try await finishRuns(800, saying: 3000, in: store)
        let report = try await store.prune(
            .init(history: .seconds(86400), runsKeptPerApp: 10), now: t0.addingTimeInterval(60 * day))
        #expect(report.pagesFreed > 1000)
        let wal = try FileManager.default.attributesOfItem(atPath: path + "-wal")[.size] as? Int ?? 0
        #expect(wal <= BackgroundStore.walSizeLimit, "the -wal file is \(wal) bytes")
    }

    // MARK: What an app or a provider could grow without end

    @Test func opensOfOneAppAMinuteApartOrLessCountOnce() async throws {
        let store = try openStore()
        try await register(a, in: store)
        try await register(b, in: store)
        #expect(try await store.recordOpen(of: a, at: t0))
        #expect(try await store.recordOpen(of: a, at: t0.addingTimeInterval(30)) == false, "30 s later: the same use")
        #expect(
            try await store.recordOpen(of: a, at: t0.addingTimeInterval(-59)) == false, "either way (a clock set back)")
        #expect(try await store.recordOpen(of: b, at: t0.addingTimeInterval(30)), "another app's open is its own")
        #expect(try await store.recordOpen(of: a, at: t0.addingTimeInterval(60)))
        // A client reporting opens in a loop stores one a minute.
        for second in stride(from: 61.0, to: 600, by: 0.5) {
            try await store.recordOpen(of: a, at: t0.addingTimeInterval(second))
        }
        #expect(
            try await store.opens(of: a).map { $0.timeIntervalSince(t0) } == [
                0, 60, 120, 180, 240, 300, 360, 420, 480, 540,
            ])
        #expect(try await store.opens(of: b).count == 1)
    }

    @Test func aReplacedPushKeepsItsRowButNotItsPayload() async throws {
        let store = try openStore()
        try await register(a, in: store)
        try await store.enqueuePushes((0..<3).map { push($0, for: a) }, now: t0)
        let newest = try await store.coalesceQueuedPushes(of: a)
        #expect(newest?.payload == Data(#"{"n":2}"#.utf8))
        let pushes = try await store.pushes(of: a)
        #expect(pushes.map(\.state) == [.queued, .replaced, .replaced])
        #expect(pushes.dropFirst().allSatisfy { $0.payload.isEmpty && $0.reasonCode == .pushReplaced })
    }

    @Test func eachAppKeepsItsNewestSettledPushesWhateverTheirAge() async throws {
        let store = try openStore()
        try await register(a, in: store)
        try await register(b, in: store)
        // A flood of alerts (recorded, settled at once) for A, a few for B, and two A still waits for.
        let alerts = (0..<40).map { number in
            var alert = push(number, for: a)
            alert.pushType = "alert"
            return alert
        }
        try await store.enqueuePushes(alerts, now: t0)
        try await store.enqueuePushes((100..<105).map { push($0, for: b) }, now: t0)
        for stored in try await store.pushes(of: b) {
            try await store.dropPush(stored.id, reason: DecisionReason(.pushUndeliverable, "test"))
        }
        try await store.enqueuePushes([push(200, for: a), push(201, for: a)], now: t0)  // queued

        let report = try await store.prune(.init(pushesKeptPerApp: 10), now: t0.addingTimeInterval(60), batch: 7)
        #expect(report.pushes == 30, "A's 30 oldest alerts; none of B's 5")
        let kept = try await store.pushes(of: a, limit: 100)
        #expect(
            kept.filter { $0.state == .recorded }.map(\.apnsID) == (30..<40).reversed().map { push($0, for: a).apnsID })
        #expect(kept.filter { $0.state == .queued }.count == 2, "queued pushes are never pruned")
        #expect(try await store.pushes(of: b).count == 5)
        #expect(try await store.prune(.init(pushesKeptPerApp: 10), now: t0.addingTimeInterval(60)).rowsDeleted == 0)
    }

    @Test func revokedDeviceTokensAreBoundedPerAppAndForgottenWithHistory() async throws {
        let store = try openStore()
        try await register(a, in: store)
        var issued: [String] = []
        // An app that registers and unregisters for remote notifications in a loop.
        for number in 0..<50 {
            let token = String(format: "%064x", number)
            issued.append(token)
            _ = try await store.deviceToken(for: a, makingWith: { token }, now: t0.addingTimeInterval(Double(number)))
            try await store.revokeDeviceTokens(of: a, now: t0.addingTimeInterval(Double(number) + 0.5))
        }
        let active = try await store.deviceToken(for: a, makingWith: { String(repeating: "f", count: 64) }, now: t0)
        let kept = try await store.deviceTokens()
        #expect(kept.count == BackgroundStore.revokedTokensKeptPerApp + 1)
        #expect(
            Set(kept.filter { $0.revokedAt != nil }.map(\.token))
                == Set(issued.suffix(BackgroundStore.revokedTokensKeptPerApp)))
        #expect(try await store.deviceTokenOwner(issued.last!)?.revokedAt != nil, "a recent one still answers 410")
        #expect(try await store.deviceTokenOwner(issued.first!) == nil, "the oldest are forgotten")

        let report = try await store.prune(.init(history: .seconds(30 * 86400)), now: t0.addingTimeInterval(31 * day))
        #expect(report.deviceTokens == BackgroundStore.revokedTokensKeptPerApp)
        #expect(
            try await store.deviceTokens().map(\.token) == [active.token], "the active token stays, whatever its age")
    }

    /// A transfer of app `a` created and ended (cancelled) at `at`: its two session events.
    func endedTransfer(_ number: Int, at: Date, in store: BackgroundStore) async throws -> TransferID {
        let request = TransferRequest(session: "s", url: URL(string: "https://example.com/\(number)")!)
        let created = try await store.createTransfer(request, app: a, now: at) { id in
            (partial: "/nonexistent/\(id).partial", destination: nil)
        }
        _ = try await store.finishTransfer(created.record.id, .cancelled, now: at)
        return created.record.id
    }

    /// A wall clock set forward (`carryForwardSessionEvents`) moves on the open session events
    /// stamped by then, and only those: not a run's (which ends with its run), not one stamped
    /// after, not one acknowledged. Expiry then counts from the moved stamps.
    @Test func aClockSetForwardCarriesOnlyTheOpenSessionEventsStampedBefore() async throws {
        let store = try openStore()
        try await register(a, in: store)
        _ = try await endedTransfer(1, at: t0, in: store)
        _ = try await store.acknowledge(upTo: try await store.lastEventSequence(for: a), for: a, now: t0)
        _ = try await endedTransfer(2, at: t0, in: store)  // two open session events
        let run = try await store.startRun(.fetch, for: a, trigger: .manual, reasons: [], budget: .seconds(30), now: t0)
        _ = try await endedTransfer(3, at: t0.addingTimeInterval(2 * day), in: store)  // after the jump

        let moved = try await store.carryForwardSessionEvents(createdBy: t0.addingTimeInterval(day), by: 40 * day)
        #expect(moved == 2, "the second transfer's two events, and nothing else")
        let expired = try await store.expireSessionEvents(
            olderThan: .seconds(day), ages: StampAges(now: t0.addingTimeInterval(4 * day)))
        #expect(expired.count == 2, "the third's, which kept its stamp: \(expired.map(\.event.body))")
        let open = try await store.openEvents(for: a)
        #expect(open.count == 3, "the second transfer's two, carried past the cutoff, and the run's")
        #expect(open.contains { if case .fetch(let id, _) = $0.body { id == run.id } else { false } })
    }

    @Test func anEndedTransferStaysOnlyWhileItsOwnEventsAreUnacknowledged() async throws {
        let store = try openStore()
        try await register(a, in: store)
        func transfer(_ number: Int) async throws -> TransferID {
            try await endedTransfer(number, at: t0.addingTimeInterval(Double(number)), in: store)
        }
        // The app acknowledged the first transfer's events, not the second's.
        let first = try await transfer(1)
        _ = try await store.acknowledge(upTo: try await store.lastEventSequence(for: a), for: a, now: t0)
        let second = try await transfer(2)
        #expect(
            try await store.openEvents(for: a).count == 2, "the second's transferCompleted and sessionEventsFinished")

        let report = try await store.prune(.init(history: .seconds(86400)), now: t0.addingTimeInterval(2 * day))
        #expect(report.transfers == 1, "an open event no longer holds every ended transfer of its app")
        #expect(try await store.transfer(first) == nil)
        #expect(try await store.transfer(second) != nil, "the app may still ask for the transfer its event names")
    }
}
