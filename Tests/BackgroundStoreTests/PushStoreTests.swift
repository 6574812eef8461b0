import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Synchronization
import Testing

/// The push queue's SQL: coalescing, state-guarded updates, replays.
struct PushStoreTests {
    /// The newest of each stays; the oldest of those goes first.
    @Test func coalescingKeepsTheNewestOfEachCollapseIDAndOfThoseWithout() async throws {
        let f = try await StoreFixture()
        try await f.store.enqueuePushes(
            [
                f.backgroundPush(1), f.backgroundPush(2, collapseID: "score"), f.backgroundPush(3),
                f.backgroundPush(4, collapseID: "score"), f.backgroundPush(5, collapseID: "news"),
            ], now: f.now)
        let first = try #require(try await f.store.coalesceQueuedPushes(of: f.app))
        #expect(first.apnsID.hasSuffix("000000000003"))
        let byNumber = Dictionary(
            uniqueKeysWithValues: try await f.store.pushes(of: f.app).map { (Int($0.apnsID.suffix(12))!, $0) })
        #expect(byNumber.mapValues(\.state) == [1: .replaced, 2: .replaced, 3: .queued, 4: .queued, 5: .queued])
        #expect(byNumber[2]?.reason == "a newer push with collapse id 'score' replaced it")
        #expect(byNumber[1]?.reasonCode == .pushReplaced)
        // Coalescing again changes nothing.
        _ = try await f.store.coalesceQueuedPushes(of: f.app)
        #expect(try await f.store.pushes(of: f.app).filter { $0.state == .queued }.count == 3)
    }

    /// A provider that gives every push a collapse id of its own fills no more than
    /// `queuedPushesPerApp` waiting pushes: the oldest make way, with a reason.
    @Test func atMostSoManyPushesWaitForAnApp() async throws {
        let f = try await StoreFixture()
        let limit = BackgroundStore.queuedPushesPerApp
        try await f.store.enqueuePushes(
            (1...(limit + 30)).map { f.backgroundPush($0, collapseID: "c\($0)") }, now: f.now)
        let first = try #require(try await f.store.coalesceQueuedPushes(of: f.app))
        #expect(first.apnsID.hasSuffix(String(format: "%012d", 31)))
        let pushes = try await f.store.pushes(of: f.app, limit: 1000)
        let queued = pushes.filter { $0.state == .queued }.map { Int($0.apnsID.suffix(12))! }
        #expect(queued.sorted() == Array(31...(limit + 30)))
        let gone = pushes.filter { $0.state == .replaced }
        #expect(gone.count == 30 && gone.allSatisfy { $0.reason?.contains("the oldest made way") == true })
    }

    @Test func aReplayedApnsIDIsOnePushAndAlertsAreOnlyRecorded() async throws {
        let f = try await StoreFixture()
        try await f.store.enqueuePushes([f.backgroundPush(1)], now: f.now)
        try await f.store.enqueuePushes([f.backgroundPush(1)], now: f.now.addingTimeInterval(1))
        var alert = f.backgroundPush(2)
        alert.pushType = "alert"
        try await f.store.enqueuePushes([alert], now: f.now)
        let pushes = try await f.store.pushes(of: f.app)
        #expect(pushes.count == 2)
        #expect(Set(pushes.map(\.state)) == [.queued, .recorded])
    }

    /// A push accepted for an app that is unregistered before the push commits (the gateway
    /// checked its token a moment before) is not stored. Before, it waited queued for good,
    /// under no app: every dispatch pass tried it, and an app registered again under that id
    /// was handed it.
    @Test func aPushForAnAppUnregisteredMeanwhileIsNotStored() async throws {
        let f = try await StoreFixture()
        #expect(try await f.store.unregister(f.app, now: f.now))
        try await f.store.enqueuePushes([f.backgroundPush(1)], now: f.now)
        #expect(try await f.store.appsWithQueuedPushes().isEmpty)
        #expect(try await f.store.pushes(of: f.app).isEmpty)
    }

    @Test func droppingAndNotingTouchOnlyAQueuedPush() async throws {
        let f = try await StoreFixture()
        try await f.store.enqueuePushes([f.backgroundPush(1)], now: f.now)
        let push = try #require(try await f.store.coalesceQueuedPushes(of: f.app))
        _ = try await f.store.startRun(
            .push(push.id, apnsID: push.apnsID, payload: "{}", allowance: nil), for: f.app,
            trigger: .remoteNotification, reasons: [], budget: .seconds(30), now: f.now)
        // In flight with its run: neither a drop nor a note may change it.
        try await f.store.dropPush(push.id, reason: DecisionReason(.pushExpired, "expired"))
        try await f.store.notePushWaiting(push.id, reason: DecisionReason(.pushWaitsForRun, "waits"))
        let stored = try #require(try await f.store.pushes(of: f.app).first)
        #expect(stored.state == .delivering)
        #expect(stored.reasonCode == .pushWake)
    }
}

/// Dates a bgd before session 28 stored from outside — past 9999, written with a five-digit year
/// or as '' — trapped bgd whenever it read them back, so at every start. Opening the store mends
/// them to the last second of 9999 (the `readableDates` migration).
struct UnreadableDatesTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)
    let app = AppID(rawValue: "com.example.a")!

    /// A store file with one app and one background push; `more` adds to it before it closes.
    func storeFile(
        _ more: (BackgroundStore) async throws -> Void = { _ in }
    ) async throws -> (directory: String, path: String) {
        let directory = NSTemporaryDirectory() + "bgd-dates-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/bgd.sqlite"
        let store = try BackgroundStore.open(atPath: path)
        _ = try await store.register(
            RegisterAppRequest(id: app, launchCommand: LaunchCommand(["/bin/true"])!), tokenHash: "h", now: now)
        try await store.enqueuePushes(
            [
                NewPush(
                    app: app, apnsID: "00000000-0000-0000-0000-000000000001", pushType: "background", priority: 5,
                    collapseID: nil, expiration: nil, payload: Data("{}".utf8))
            ], now: now)
        try await more(store)
        return (directory, path)
    }

    @Test func datesNoReadCouldTakeAreMendedWhenTheStoreOpens() async throws {
        let transfer = Mutex<TransferID?>(nil)
        let (directory, path) = try await storeFile { store in
            let id = try await store.createTransfer(
                TransferRequest(session: "s", url: URL(string: "http://127.0.0.1/file")!), app: app, now: now
            ) { id in ("/tmp/\(id).partial", "/tmp/\(id)") }.record.id
            transfer.withLock { $0 = id }
        }
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // As the old bgd wrote them, and as if it had never opened a store with the mend.
        try await OlderStoreFile.rewrite(
            path,
            with: [
                "UPDATE push SET expiration = '10000-01-01 00:00:00.000'", "UPDATE transfer SET nextAttemptAt = ''",
            ],
            forgetting: "readableDates")

        let store = try BackgroundStore.open(atPath: path)
        #expect(try await store.pushes(of: app).map(\.expiration) == [StorableDates.latest])
        #expect(
            try await store.transfer(try #require(transfer.withLock { $0 }))?.record.nextAttemptAt
                == StorableDates.latest)
    }

    /// A date no read can take (a damaged file, a hand edit) is an error of that read, not the
    /// end of bgd: GRDB's subscript stops the process, and bgd read the same row at every start.
    @Test func aDateNoReadCanTakeIsAnErrorNotACrash() async throws {
        let (directory, path) = try await storeFile { store in
            _ = try await store.deviceToken(for: app, makingWith: { String(repeating: "a", count: 64) }, now: now)
            try await store.recordOpen(of: app, at: now)
        }
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await OlderStoreFile.rewrite(
            path,
            with: [
                "UPDATE push SET receivedAt = 'not a date'", "UPDATE deviceToken SET createdAt = 'nor this'",
                "UPDATE usage SET openedAt = 'yesterday'",
            ],
            forgetting: "readableDates")
        let store = try BackgroundStore.open(atPath: path)
        await #expect(throws: (any Error).self) { try await store.pushes(of: app) }
        await #expect(throws: (any Error).self) { try await store.coalesceQueuedPushes(of: app) }
        await #expect(throws: (any Error).self) { try await store.activeDeviceToken(of: app) }
        await #expect(throws: (any Error).self) { try await store.allOpens(since: .distantPast) }
        #expect(try await store.app(app) != nil, "the rest of the store reads")
    }
}
