import BackgroundModel
import BackgroundStore
import Foundation
import Testing

/// `BGTaskScheduler` requests in the store: the real scheduler's rules, and a run that takes one.
struct TaskStoreTests {
    @Test func submittingFollowsTheRealSchedulersRules() async throws {
        let f = try await StoreFixture()
        await #expect(throws: TaskSchedulerError.notPermitted) {
            try await f.store.submitTaskRequest(
                TaskRequest(identifier: "com.example.undeclared", kind: .processing), for: f.app, now: f.now)
        }
        try await f.store.submitTaskRequest(
            TaskRequest(identifier: "com.example.a.refresh", kind: .appRefresh), for: f.app, now: f.now)
        // The same identifier replaces; another refresh request is one too many.
        try await f.store.submitTaskRequest(
            TaskRequest(identifier: "com.example.a.refresh", kind: .appRefresh, earliestBeginDate: f.now), for: f.app,
            now: f.now)
        #expect(try await f.store.pendingTaskRequests(of: f.app).count == 1)
        #expect(try await f.store.pendingTaskRequests(of: f.app).first?.request.earliestBeginDate == f.now)
    }

    /// Background refresh turned off drops the pending refresh request (it would be refused if
    /// submitted now, and would wait for a wake that never comes, holding the refresh slot); a
    /// registration that no longer declares an identifier drops its requests. Taken ones stay.
    @Test func requestsTheAppsNewSettingsRefuseAreDropped() async throws {
        let f = try await StoreFixture()
        try await f.store.submitTaskRequest(
            TaskRequest(identifier: "com.example.a.refresh", kind: .appRefresh), for: f.app, now: f.now)
        try await f.store.submitTaskRequest(
            TaskRequest(identifier: "com.example.a.work", kind: .processing), for: f.app, now: f.now)
        try await f.store.setFetchInterval(.every(.seconds(3600)), for: f.app)
        #expect(try await f.store.pendingTaskRequests(of: f.app).count == 2, "refresh still on: both kept")
        try await f.store.setFetchInterval(.never, for: f.app)
        #expect(try await f.store.pendingTaskRequests(of: f.app).map(\.request.identifier) == ["com.example.a.work"])

        _ = try await f.store.replaceRegistration(
            RegisterAppRequest(
                id: f.app, launchCommand: LaunchCommand(["/bin/true"])!, taskIdentifiers: ["com.example.a.refresh"]))
        #expect(try await f.store.pendingTaskRequests(of: f.app).isEmpty)
        // The same identifiers again: nothing pending is touched.
        try await f.store.setFetchInterval(.minimum, for: f.app)
        try await f.store.submitTaskRequest(
            TaskRequest(identifier: "com.example.a.refresh", kind: .appRefresh), for: f.app, now: f.now)
        _ = try await f.store.replaceRegistration(
            RegisterAppRequest(
                id: f.app, launchCommand: LaunchCommand(["/bin/true"])!, taskIdentifiers: ["com.example.a.refresh"]))
        #expect(try await f.store.pendingTaskRequests(of: f.app).count == 1)
        // An app that declares none has none left.
        _ = try await f.store.replaceRegistration(
            RegisterAppRequest(id: f.app, launchCommand: LaunchCommand(["/bin/true"])!, taskIdentifiers: []))
        #expect(try await f.store.pendingTaskRequests(of: f.app).isEmpty)
    }

    @Test func aTaskRunTakesOnlyAPendingRequestOfItsKind() async throws {
        let f = try await StoreFixture()
        try await f.store.submitTaskRequest(
            TaskRequest(identifier: "com.example.a.work", kind: .processing), for: f.app, now: f.now)
        await #expect(throws: StoreError.taskRequestNotFound(f.app, "com.example.a.work")) {
            _ = try await f.store.startRun(
                .task(identifier: "com.example.a.work", kind: .appRefresh), for: f.app, trigger: .manual, reasons: [],
                budget: .seconds(30), now: f.now)
        }
        // Refused as a whole: no run, no event.
        #expect(try await f.store.runsInFlight().isEmpty)
        #expect(try await f.store.openEvents(for: f.app).isEmpty)
        let run = try await f.store.startRun(
            .task(identifier: "com.example.a.work", kind: .processing), for: f.app, trigger: .manual, reasons: [],
            budget: .seconds(600), now: f.now)
        #expect(run.taskIdentifier == "com.example.a.work")
        #expect(try await f.store.runningTasks().map(\.run.id) == [run.id])
        // Taken, so cancelling it does nothing, and it is no longer pending.
        #expect(try await f.store.cancelTaskRequests(of: f.app, identifier: "com.example.a.work") == 0)
        #expect(try await f.store.pendingTaskRequests(of: f.app).isEmpty)
    }

    /// Every kind of run starts through one path, and each kind carries its own event.
    @Test func everyKindOfRunStartsThroughOnePathWithItsEvent() async throws {
        let f = try await StoreFixture()
        try await f.store.submitTaskRequest(
            TaskRequest(identifier: "com.example.a.work", kind: .processing), for: f.app, now: f.now)
        try await f.store.enqueuePushes([f.backgroundPush(1)], now: f.now)
        let push = try #require(try await f.store.coalesceQueuedPushes(of: f.app))
        let starts: [RunStart] = [
            .fetch, .push(push.id, apnsID: push.apnsID, payload: "{}", allowance: nil),
            .task(identifier: "com.example.a.work", kind: .processing), .events,
        ]
        for (offset, start) in starts.enumerated() {
            let at = f.now.addingTimeInterval(Double(offset))
            let run = try await f.store.startRun(
                start, for: f.app, trigger: .manual, reasons: [], budget: .seconds(30), now: at)
            #expect(run.kind == start.kind)
            let event = try await f.store.openEvents(for: f.app).last
            switch start {
            case .fetch: #expect(event?.body == .fetch(run: run.id, budget: .seconds(30)))
            case .push: #expect(event?.run == run.id)
            case .task: #expect(event?.run == run.id)
            case .events:
                #expect(event?.run != run.id, "a run for transfer events carries no event of its own")
                #expect(run.reasons.first?.code == .transferEventsWaiting)
            }
            try await f.store.finishRun(run.id, outcome: .newData, now: at.addingTimeInterval(0.5))
            for open in try await f.store.openEvents(for: f.app) {
                _ = try await f.store.acknowledge(upTo: open.seq, for: f.app, now: at)
            }
        }
    }
}
