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

    @Test func theFileGivesItsPagesBack() async throws {
        let store = try openStore()
        try await register(a, in: store)
        let reasons = [DecisionReason(.predictedOpen, String(repeating: "why ", count: 200))]
        for i in 0..<600 {
            let start = t0.addingTimeInterval(Double(i) * 600)
            let run = try await store.startRun(
                .fetch, for: a, trigger: .scheduled, reasons: reasons, budget: .seconds(30), now: start)
            _ = try await store.finishRun(run.id, outcome: .newData, now: start.addingTimeInterval(10))
        }
        let before = try await store.pageCounts()
        let report = try await store.prune(
            .init(history: .seconds(86400), runsKeptPerApp: 10), now: t0.addingTimeInterval(60 * day))
        let after = try await store.pageCounts()
        #expect(report.runs == 590)
        #expect(report.pagesFreed > 0)
        #expect(after.pages < before.pages / 2, "\(before.pages) → \(after.pages) pages")
        #expect(after.free == 0)
    }
}
