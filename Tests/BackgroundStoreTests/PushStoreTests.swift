import BackgroundModel
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
