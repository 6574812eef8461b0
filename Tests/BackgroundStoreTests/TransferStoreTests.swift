import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Testing

/// The transfer table's state-guarded updates: each change applies only from the states it is
/// meant for, and an ending is recorded (with its events) once.
struct TransferStoreTests {
    @Test func anEndingIsRecordedOnceWithTheAppsEvents() async throws {
        let f = try await StoreFixture()
        let transfer = try await f.download()
        let first = try await f.store.finishTransfer(
            transfer.record.id, .completed(location: "/tmp/x", statusCode: 200), now: f.now)
        #expect(first?.state == .completed)
        // downloadFinished, transferCompleted, and the session's last: sessionEventsFinished.
        #expect(try await f.store.openEvents(for: f.app).count == 3)
        let again = try await f.store.finishTransfer(transfer.record.id, .cancelled, now: f.now)
        #expect(again == nil)
        #expect(try await f.store.transfer(transfer.record.id)?.record.state == .completed)
        #expect(try await f.store.openEvents(for: f.app).count == 3)
    }

    @Test func theSessionsLastEventWaitsForItsOtherTransfers() async throws {
        let f = try await StoreFixture()
        let one = try await f.download()
        _ = try await f.download()
        _ = try await f.store.finishTransfer(
            one.record.id, .failed(TransferError(.httpError, "404"), statusCode: 404), now: f.now)
        let events = try await f.store.openEvents(for: f.app)
        #expect(events.count == 1)
        guard case .transferCompleted(_, _, _, let status, let error) = events.first?.body else {
            Issue.record("not transferCompleted: \(events)")
            return
        }
        #expect(status == 404)
        #expect(error?.code == .httpError)
    }

    /// A pause and a resume count as progress: a transfer paused after days of waiting is not
    /// one left paused that long (the pruner cancels those), and one resumed after a long pause
    /// is not stalled (the policy failed it as `noProgress` at once).
    @Test func aPauseAndAResumeCountAsProgress() async throws {
        let f = try await StoreFixture()
        let id = try await f.download().record.id
        let day: TimeInterval = 86400
        let paused = try #require(try await f.store.pauseTransfer(id, now: f.now.addingTimeInterval(3 * day)))
        #expect(paused.lastProgressAt == f.now.addingTimeInterval(3 * day))
        let left = { (at: TimeInterval) in
            try await f.store.pausedTransfers(
                idleFor: .seconds(day), ages: StampAges(now: f.now.addingTimeInterval(at)))
        }
        #expect(try await left(3.5 * day).isEmpty, "paused half a day ago")
        #expect(try await left(4.5 * day) == [id], "paused a day and a half ago")
        let resumed = try #require(try await f.store.resumeTransfer(id, now: f.now.addingTimeInterval(9 * day)))
        #expect(resumed.lastProgressAt == f.now.addingTimeInterval(9 * day))
    }

    @Test func pauseAndResumeApplyOnlyFromTheirStates() async throws {
        let f = try await StoreFixture()
        let id = try await f.download().record.id
        #expect(try await f.store.resumeTransfer(id, now: f.now) == nil, "not paused")
        #expect(try await f.store.pauseTransfer(id, now: f.now)?.record.state == .paused)
        #expect(try await f.store.pauseTransfer(id, now: f.now) == nil, "paused already")
        #expect(try await f.store.startAttempt(id) == nil, "a paused transfer makes no attempt")
        #expect(try await f.store.resumeTransfer(id, now: f.now)?.record.state == .waiting)
        let attempt = try await f.store.startAttempt(id)
        #expect(attempt?.record.state == .running)
        #expect(attempt?.record.attempts == 1)
    }

    @Test func aWaitingReasonIsNeverWrittenOnAnEndedTransfer() async throws {
        let f = try await StoreFixture()
        let id = try await f.download().record.id
        #expect(try await f.store.setWaiting(id, reason: "waiting for a network"))
        #expect(try await f.store.transfer(id)?.record.waitingReason == "waiting for a network")
        // The same reason again changes nothing (bgd says so once, not on every pass).
        #expect(try await !f.store.setWaiting(id, reason: "waiting for a network"))
        _ = try await f.store.finishTransfer(id, .cancelled, now: f.now)
        #expect(try await !f.store.setWaiting(id, reason: "waiting for an unmetered network"))
        let ended = try #require(try await f.store.transfer(id)?.record)
        #expect(ended.state == .cancelled)
        #expect(ended.waitingReason == nil)
    }

    /// Progress is bytes beyond the most the transfer ever held: after a restart from zero (a
    /// server that ignores Range), the bytes fetched again end no run of failures and hold off
    /// no `noProgress`; past the old mark they do again.
    @Test func bytesFetchedAgainAfterARestartAreNoProgress() async throws {
        let f = try await StoreFixture()
        let id = try await f.download().record.id
        _ = try await f.store.startAttempt(id)
        try await f.store.saveCheckpoint(
            id, DownloadCheckpoint(offset: 500_000, total: 1_000_000, validator: nil), restarted: false, now: f.now)
        for _ in 0..<3 { try await f.store.scheduleRetry(id, error: "the body ended", at: f.now) }
        let later = f.now.addingTimeInterval(600)
        try await f.store.saveCheckpoint(
            id, DownloadCheckpoint(offset: 0, total: 1_000_000, validator: nil), restarted: true, now: later)
        try await f.store.saveCheckpoint(
            id, DownloadCheckpoint(offset: 400_000, total: 1_000_000, validator: nil), restarted: false, now: later)
        var stored = try #require(try await f.store.transfer(id))
        #expect(stored.consecutiveFailures == 3 && stored.lastProgressAt == f.now, "fetched again: no progress")
        #expect(stored.record.bytesTransferred == 400_000)
        try await f.store.saveCheckpoint(
            id, DownloadCheckpoint(offset: 600_000, total: 1_000_000, validator: nil), restarted: false, now: later)
        stored = try #require(try await f.store.transfer(id))
        #expect(stored.consecutiveFailures == 0 && stored.lastProgressAt == later, "past the mark: progress")
        // The file shrank on the server (another file): its bytes are progress from the start.
        try await f.store.scheduleRetry(id, error: "the body ended", at: later)
        let shrunk = later.addingTimeInterval(60)
        try await f.store.saveCheckpoint(
            id, DownloadCheckpoint(offset: 0, total: 300_000, validator: nil), restarted: true, now: shrunk)
        try await f.store.saveCheckpoint(
            id, DownloadCheckpoint(offset: 100_000, total: 300_000, validator: nil), restarted: false, now: shrunk)
        stored = try #require(try await f.store.transfer(id))
        #expect(stored.consecutiveFailures == 0 && stored.lastProgressAt == shrunk, "another file: progress")
    }

    @Test func aRetryIsCountedAndTimed() async throws {
        let f = try await StoreFixture()
        let id = try await f.download().record.id
        _ = try await f.store.startAttempt(id)
        try await f.store.scheduleRetry(id, error: "HTTP 503", at: f.now.addingTimeInterval(30))
        let record = try #require(try await f.store.transfer(id)?.record)
        #expect(record.state == .waiting)
        #expect(record.nextAttemptAt == f.now.addingTimeInterval(30))
        #expect(record.lastError == "HTTP 503")
    }
}
