import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Testing

/// The push queue's SQL: coalescing, state-guarded updates, replays.
struct PushStoreTests {
    @Test func coalescingKeepsTheNewestOfEachCollapseIDAndOfThoseWithout() async throws {
        let f = try await StoreFixture()
        try await f.store.enqueuePushes(
            [
                f.backgroundPush(1), f.backgroundPush(2, collapseID: "score"), f.backgroundPush(3),
                f.backgroundPush(4, collapseID: "score"), f.backgroundPush(5, collapseID: "news"),
            ], now: f.now)
        let newest = try #require(try await f.store.coalesceQueuedPushes(of: f.app))
        #expect(newest.apnsID.hasSuffix("000000000005"))
        let byNumber = Dictionary(
            uniqueKeysWithValues: try await f.store.pushes(of: f.app).map { (Int($0.apnsID.suffix(12))!, $0) })
        #expect(byNumber.mapValues(\.state) == [1: .replaced, 2: .replaced, 3: .queued, 4: .queued, 5: .queued])
        #expect(byNumber[2]?.reason == "a newer push with collapse id 'score' replaced it")
        #expect(byNumber[1]?.reasonCode == .pushReplaced)
        // Coalescing again changes nothing.
        _ = try await f.store.coalesceQueuedPushes(of: f.app)
        #expect(try await f.store.pushes(of: f.app).filter { $0.state == .queued }.count == 3)
    }

    @Test func onePassCoalescesEveryAppAndReadsEachAllowance() async throws {
        let f = try await StoreFixture()
        let other = AppID(rawValue: "com.example.b")!
        _ = try await f.store.register(
            RegisterAppRequest(
                id: other, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum, taskIdentifiers: []),
            tokenHash: "h2", now: f.now)
        func forOther(_ push: NewPush) -> NewPush {
            var push = push
            push.app = other
            return push
        }
        // The first app was woken once already: its allowance is saved with that run.
        try await f.store.enqueuePushes([f.backgroundPush(1)], now: f.now)
        let first = try #require(try await f.store.coalesceAllQueuedPushes().first)
        let spent = PushThrottle.Allowance(tokens: 2.5, at: f.now)
        let run = try await f.store.startRun(
            .push(first.newest.id, apnsID: first.newest.apnsID, payload: "{}", allowance: spent), for: f.app,
            trigger: .remoteNotification, reasons: [], budget: .seconds(30), now: f.now)
        #expect(try await f.store.coalesceAllQueuedPushes().isEmpty)  // in flight: not offered again
        try await f.store.finishRun(run.id, outcome: .newData, now: f.now.addingTimeInterval(1))

        try await f.store.enqueuePushes(
            [
                f.backgroundPush(2, collapseID: "score"), forOther(f.backgroundPush(11)), f.backgroundPush(3),
                forOther(f.backgroundPush(12, collapseID: "x")), f.backgroundPush(4, collapseID: "score"),
                forOther(f.backgroundPush(13, collapseID: "x")),
            ], now: f.now)
        let pass = try await f.store.coalesceAllQueuedPushes()
        #expect(pass.map(\.app) == [f.app, other])
        #expect(pass.map { $0.newest.apnsID.suffix(2) } == ["04", "13"])
        #expect(pass.map(\.allowance) == [spent, nil])
        // What stays queued is what coalescing one app at a time leaves.
        let states = try await (f.store.pushes(of: f.app) + f.store.pushes(of: other)).reduce(into: [Int: PushState]()) {
            $0[Int($1.apnsID.suffix(12))!] = $1.state
        }
        #expect(states == [1: .delivered, 2: .replaced, 3: .queued, 4: .queued, 11: .queued, 12: .replaced, 13: .queued])
        #expect(try await f.store.coalesceAllQueuedPushes().map(\.newest.id) == pass.map(\.newest.id))
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
