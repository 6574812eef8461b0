import BackgroundModel
import BackgroundStore
import Foundation
import Testing

/// What a run carries — a push, a task request — settles with the run's end: delivered when the
/// app answered, put back when the run was cut short, given up after repeated failures. And a
/// provider's retry of the same apns-id is one push.
struct DeliverySettlementTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)
    let app = AppID(rawValue: "com.example.a")!

    func registered() async throws -> BackgroundStore {
        let store = try BackgroundStore.inMemory()
        _ = try await store.register(
            RegisterAppRequest(
                id: app, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum,
                taskIdentifiers: ["com.example.a.work"]),
            tokenHash: "h", now: now)
        return store
    }

    func push(_ apnsID: String) -> NewPush {
        NewPush(
            app: app, apnsID: apnsID, pushType: "background", priority: 5, collapseID: nil, expiration: nil,
            payload: Data(#"{"aps":{"content-available":1}}"#.utf8))
    }

    /// Queues one push and starts its run; returns the push and the run.
    func pushInFlight(
        _ store: BackgroundStore, apnsID: String = "00000000-0000-0000-0000-000000000001"
    ) async throws -> (StoredPush, RunRecord) {
        try await store.enqueuePushes([push(apnsID)], now: now)
        let queued = try #require(try await store.coalesceQueuedPushes(of: app))
        let run = try await store.startRun(
            .push(queued.id, apnsID: queued.apnsID, payload: "{}", allowance: nil), for: app,
            trigger: .remoteNotification,
            reasons: [], budget: .seconds(30), now: now)
        return (queued, run)
    }

    func state(of push: StoredPush, in store: BackgroundStore) async throws -> StoredPush {
        try #require(try await store.pushes(of: app).first { $0.id == push.id })
    }

    @Test func aReplayedApnsIDIsOnePush() async throws {
        let store = try await registered()
        try await store.enqueuePushes([push("00000000-0000-0000-0000-00000000000a")], now: now)
        try await store.enqueuePushes(
            [push("00000000-0000-0000-0000-00000000000a"), push("00000000-0000-0000-0000-00000000000b")], now: now)
        #expect(
            try await store.pushes(of: app).map(\.apnsID).sorted() == [
                "00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b",
            ])
    }

    @Test func aPushIsDeliveredOnlyWhenTheAppAnswers() async throws {
        let store = try await registered()
        let (push, run) = try await pushInFlight(store)
        #expect(try await state(of: push, in: store).state == .delivering)
        #expect(try await store.appsWithQueuedPushes().isEmpty)  // not offered twice while in flight
        try await store.finishRun(run.id, outcome: .noData, now: now.addingTimeInterval(1))
        #expect(try await state(of: push, in: store).state == .delivered)
    }

    @Test func aRunCutShortByBgdPutsItsPushBack() async throws {
        let store = try await registered()
        let (push, _) = try await pushInFlight(store)
        // bgd was killed with the run in flight; the next start closes it.
        let interrupted = try await store.closeInterruptedRuns(now: now.addingTimeInterval(5))
        #expect(interrupted.count == 1)
        let after = try await state(of: push, in: store)
        #expect(after.state == .queued)
        #expect(after.reasonCode == .pushRetry)
        #expect(try await store.appsWithQueuedPushes() == [app])
        // It goes again, in a new run whose event names the same apns-id.
        let run = try await store.startRun(
            .push(push.id, apnsID: push.apnsID, payload: "{}", allowance: nil), for: app, trigger: .remoteNotification,
            reasons: [], budget: .seconds(30), now: now)
        let event = try #require(try await store.openEvents(for: app).last)
        #expect(
            event.body == .remoteNotification(run: run.id, payload: "{}", budget: .seconds(30), apnsID: push.apnsID))
    }

    @Test func aPushWhoseRunsKeepCrashingIsGivenUpWithAReason() async throws {
        let store = try await registered()
        let (push, first) = try await pushInFlight(store)
        try await store.finishRun(first.id, outcome: .crashed, now: now)
        for attempt in 2...BackgroundStore.pushDeliveryAttempts {
            let before = try await state(of: push, in: store)
            #expect(before.state == .queued)
            #expect(before.attempts == attempt - 1, "each run it went to is counted")
            let run = try await store.startRun(
                .push(push.id, apnsID: push.apnsID, payload: "{}", allowance: nil), for: app,
                trigger: .remoteNotification,
                reasons: [], budget: .seconds(30), now: now)
            try await store.finishRun(run.id, outcome: .launchFailed, now: now)
        }
        let after = try await state(of: push, in: store)
        #expect(after.state == .dropped)
        #expect(after.attempts == BackgroundStore.pushDeliveryAttempts)
        #expect(after.reasonCode == .pushUndeliverable)
        #expect(after.reason?.contains("given up after 3 tries") == true)
    }

    @Test func aHandlerThatOverrunsDropsItsPush() async throws {
        let store = try await registered()
        let (push, run) = try await pushInFlight(store)
        try await store.finishRun(run.id, outcome: .expired, now: now.addingTimeInterval(30))
        let after = try await state(of: push, in: store)
        #expect(after.state == .dropped)
        #expect(after.reasonCode == .pushUndeliverable)
    }

    /// The app's processing request `com.example.a.work`, submitted now.
    func submitWork(to store: BackgroundStore) async throws {
        try await store.submitTaskRequest(
            TaskRequest(identifier: "com.example.a.work", kind: .processing), for: app, now: now)
    }

    /// A scheduled run taking that request.
    func startWork(in store: BackgroundStore) async throws -> RunRecord {
        try await store.startRun(
            .task(identifier: "com.example.a.work", kind: .processing), for: app, trigger: .scheduled, reasons: [],
            budget: .seconds(600), now: now)
    }

    @Test func aTaskRunCutShortByBgdLeavesItsRequestPending() async throws {
        let store = try await registered()
        try await submitWork(to: store)
        let run = try await startWork(in: store)
        #expect(try await store.pendingTaskRequests(of: app).isEmpty)  // taken while it runs
        _ = try await store.closeInterruptedRuns(now: now.addingTimeInterval(5))
        #expect(try await store.pendingTaskRequests(of: app).map(\.request.identifier) == ["com.example.a.work"])
        // Carried out and answered: gone for good.
        let again = try await startWork(in: store)
        try await store.finishRun(again.id, outcome: .newData, now: now.addingTimeInterval(60))
        #expect(try await store.pendingTaskRequests(of: app).isEmpty)
        _ = run
    }

    @Test func aRequestSubmittedAgainWhileItsTaskRunsStands() async throws {
        let store = try await registered()
        try await submitWork(to: store)
        let run = try await startWork(in: store)
        try await store.submitTaskRequest(
            TaskRequest(identifier: "com.example.a.work", kind: .processing, requiresExternalPower: true), for: app,
            now: now)
        try await store.finishRun(run.id, outcome: .newData, now: now.addingTimeInterval(60))
        #expect(try await store.pendingTaskRequests(of: app).map(\.request.requiresExternalPower) == [true])
    }

    /// A task whose runs bgd dies during (the OOM killer, a watchdog) is given up after a few,
    /// and the run says so; put back every time, it started again at every start of bgd, for
    /// ever. A stop bgd was asked for (its SIGTERM) is no fault of the task and does not count.
    /// The app submitting again at its launch (as apps do) carries the count on; a run of it that
    /// ends otherwise starts it over.
    @Test func aTaskThatBgdDiesDuringIsGivenUpAfterAFew() async throws {
        let store = try await registered()
        /// A run bgd dies during; the detail of the run it closes.
        func die(resubmitting: Bool = false) async throws -> String {
            _ = try await startWork(in: store)
            if resubmitting { try await submitWork(to: store) }
            return try #require(try await store.closeInterruptedRuns(now: now).first?.run.detail)
        }
        try await submitWork(to: store)
        for death in 1...BackgroundStore.taskRequestCrashLimit {
            // A stop bgd was asked for, between the deaths.
            let stopped = try await startWork(in: store)
            try await store.finishRun(stopped.id, outcome: .interrupted, now: now)
            #expect(try await store.pendingTaskRequests(of: app).count == 1)
            let detail = try await die(resubmitting: death == 2)
            if death < BackgroundStore.taskRequestCrashLimit {
                #expect(try await store.pendingTaskRequests(of: app).count == 1, "death \(death): pending again")
                #expect(!detail.contains("given up"), "\(detail)")
            } else {
                #expect(try await store.pendingTaskRequests(of: app).isEmpty, "given up")
                #expect(detail.contains("given up: bgd died during 3 of its runs"), "\(detail)")
            }
        }
        // Submitted anew, it starts from nothing; a run that ends otherwise (here the app's
        // answer, the app having submitted again meanwhile) starts the count over.
        try await submitWork(to: store)
        _ = try await die()
        _ = try await die()
        let answered = try await startWork(in: store)
        try await submitWork(to: store)
        try await store.finishRun(answered.id, outcome: .newData, now: now)
        _ = try await die()
        _ = try await die()
        #expect(try await store.pendingTaskRequests(of: app).count == 1, "two deaths since the answer")
    }

    /// A request put back after bgd's stop meets the app's settings of now: an identifier it no
    /// longer declares, or a refresh request once background refresh is off, is not put back.
    @Test func aRequestTheAppNoLongerAllowsIsNotPutBack() async throws {
        let store = try await registered()
        try await submitWork(to: store)
        let run = try await startWork(in: store)
        _ = try await store.replaceRegistration(
            RegisterAppRequest(id: app, launchCommand: LaunchCommand(["/bin/true"])!, taskIdentifiers: []))
        try await store.finishRun(run.id, outcome: .interrupted, now: now)
        #expect(try await store.pendingTaskRequests(of: app).isEmpty)
    }

    /// A task start names the request it read: one submitted anew since (another date, other
    /// needs) is not started under the old one's.
    @Test func aTaskStartTakesOnlyTheRequestItRead() async throws {
        let store = try await registered()
        // A time with digits below the millisecond, as a real clock's: read back and written
        // again, GRDB's text can lose a millisecond, and an exact match never held.
        let now = self.now.addingTimeInterval(0.123_456_7)
        try await submitWork(to: store)
        let read = try #require(try await store.pendingTaskRequests(of: app).first)
        try await store.submitTaskRequest(
            TaskRequest(identifier: "com.example.a.work", kind: .processing, requiresExternalPower: true), for: app,
            now: now.addingTimeInterval(1))
        await #expect(throws: StoreError.taskRequestNotFound(app, "com.example.a.work")) {
            _ = try await store.startRun(
                .task(identifier: "com.example.a.work", kind: .processing, submittedAt: read.submittedAt), for: app,
                trigger: .scheduled, reasons: [], budget: .seconds(600), now: now)
        }
        let current = try #require(try await store.pendingTaskRequests(of: app).first)
        let run = try await store.startRun(
            .task(identifier: "com.example.a.work", kind: .processing, submittedAt: current.submittedAt), for: app,
            trigger: .scheduled, reasons: [], budget: .seconds(600), now: now)
        #expect(run.taskIdentifier == "com.example.a.work")
    }

    /// Which runs the fetch policy learns from (docs/scheduling.md): fetches and app-refresh
    /// tasks. A push run, a processing task and a launch for transfer events neither anchor the
    /// next fetch nor count as trouble — but any run in flight holds the fetch back.
    @Test func onlyFetchesAndRefreshTasksFeedTheFetchPolicy() async throws {
        let store = try await registered()
        let fetch = try await store.startRun(
            .fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30), now: now)
        try await store.finishRun(fetch.id, outcome: .newData, now: now.addingTimeInterval(1))
        let (_, pushRun) = try await pushInFlight(store)
        #expect(try await store.fetchCandidates().first?.isRunning == true, "a push run in flight holds the fetch back")
        try await store.finishRun(pushRun.id, outcome: .crashed, now: now.addingTimeInterval(2))
        try await submitWork(to: store)
        let task = try await store.startRun(
            .task(identifier: "com.example.a.work", kind: .processing), for: app, trigger: .scheduled, reasons: [],
            budget: .seconds(600),
            now: now.addingTimeInterval(3))
        try await store.finishRun(task.id, outcome: .expired, now: now.addingTimeInterval(4))
        let events = try await store.startRun(
            .events, for: app, trigger: .transferEvents, reasons: [], budget: .seconds(30),
            now: now.addingTimeInterval(5))
        #expect(try await store.fetchCandidates().first?.isRunning == true, "so does a run for transfer events")
        try await store.finishRun(events.id, outcome: .interrupted, now: now.addingTimeInterval(6))
        // `bgctl simulate fetch`: a fetch like any other for the policy, marked as the operator's
        // (it spends none of the app's wakes; UsageOutlook leaves it out of the budget).
        let manual = try await store.startRun(
            .fetch, for: app, trigger: .manual, reasons: [], budget: .seconds(30), now: now.addingTimeInterval(7))
        #expect(try await store.fetchCandidates().first?.isRunning == true, "a manual fetch in flight holds it back")
        try await store.finishRun(manual.id, outcome: .noData, now: now.addingTimeInterval(8))
        let candidate = try #require(try await store.fetchCandidates(answersSince: now.addingTimeInterval(-60)).first)
        #expect(candidate.recentRuns.map(\.outcome) == [.noData, .newData], "the fetches: \(candidate.recentRuns)")
        #expect(candidate.recentRuns.map(\.manual) == [true, false])
        #expect(candidate.answers.count == 2 && !candidate.isRunning)
    }
}
