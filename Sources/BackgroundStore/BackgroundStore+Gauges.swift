import BackgroundModel
import Foundation
import GRDB

extension BackgroundStore {
    /// Totals for the metrics: events not yet acknowledged (the outbox depth), transfers in
    /// flight or waiting to retry, and pushes waiting to wake their app.
    public func gauges() async throws -> (openEvents: Int, activeTransfers: Int, queuedPushes: Int) {
        try await writer.read { db in
            let events = try Int.fetchOne(db, sql: "SELECT count(*) FROM event WHERE closedAt IS NULL") ?? 0
            let transfers = try Int.fetchOne(db, sql: "SELECT count(*) FROM transfer WHERE finishedAt IS NULL") ?? 0
            let pushes =
                try Int.fetchOne(db, sql: "SELECT count(*) FROM push WHERE state = '\(PushState.queued.rawValue)'") ?? 0
            return (events, transfers, pushes)
        }
    }
}

/// Times each commit of the writer connection (from "about to commit" to "committed": the
/// journal write and, with `durability: .full`, the fsync), for `bgd_store_commit_seconds`.
final class CommitTimer: TransactionObserver, @unchecked Sendable {
    // @unchecked: GRDB calls an observer only on the writer's serial queue.
    private let report: (@Sendable (Duration) -> Void)?
    private let commits: Generation
    private var started: ContinuousClock.Instant?

    init(report: (@Sendable (Duration) -> Void)?, commits: Generation) {
        self.report = report
        self.commits = commits
    }

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseWillCommit() throws { started = ContinuousClock.now }
    func databaseDidCommit(_ db: Database) {
        commits.advance()
        if let started { report?(ContinuousClock.now - started) }
        started = nil
    }
    func databaseDidRollback(_ db: Database) { started = nil }
}
