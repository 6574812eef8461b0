import BackgroundModel
import BackgroundPolicy
import Foundation
import GRDB

/// What bgd keeps of finished work, so that a daemon running for months stays the size it had
/// after the first ones. Nothing an app or a provider still waits for is ever deleted: queued
/// pushes, unacknowledged events, runs in flight and what they hold, transfers not ended. (A
/// transfer's events the app leaves unacknowledged for `history` are closed as expired first, by
/// `expireSessionEvents`: nothing else would ever end them.)
extension BackgroundStore {
    public struct Retention: Hashable, Sendable {
        /// Finished work older than this goes: ended runs, acknowledged events, ended transfers
        /// whose events the app has acknowledged, pushes delivered, replaced or dropped, and
        /// revoked device tokens. Ended runs stay at least `FetchYield.answerMemory`: the fetch
        /// policy reads their answers that far back.
        public var history: Duration
        /// Opens are the usage models' evidence: kept at least as long as they read back
        /// (the adaptive learner eight weeks, the learned model as far as it goes).
        public var opens: Duration
        /// The latest runs of each app stay whatever their age, and as many of its latest
        /// fetches (with app-refresh tasks): the fetch policy anchors an app's next wake on its
        /// last fetch and backs off on its last failures, and an app woken often for pushes
        /// would otherwise push its last fetch out. Latest by id, the order they started in, as
        /// the policy reads them: not by a start time a clock that ran ahead stamped.
        public var runsKeptPerApp: Int
        /// Settled pushes (delivered, replaced, dropped, recorded) are kept for `history`, but
        /// at most this many of each app's, newest first: a provider may send as fast as the
        /// gateway takes them, and history that grows with a sender's rate is not bounded.
        public var pushesKeptPerApp: Int

        public init(
            history: Duration = .seconds(30 * 86400), opens: Duration = .seconds(90 * 86400), runsKeptPerApp: Int = 20,
            pushesKeptPerApp: Int = 1000
        ) {
            self.history = history
            self.opens = opens
            self.runsKeptPerApp = max(1, runsKeptPerApp)
            self.pushesKeptPerApp = max(1, pushesKeptPerApp)
        }
    }

    /// What one pruning pass deleted, and the pages it gave back to the file system.
    public struct PruneReport: Hashable, Sendable {
        public var runs = 0
        public var events = 0
        public var pushes = 0
        public var transfers = 0
        public var opens = 0
        public var deviceTokens = 0
        public var pagesFreed = 0

        public var rowsDeleted: Int { runs + events + pushes + transfers + opens + deviceTokens }
    }

    /// Deletes what `retention` no longer keeps, `batch` rows a transaction so that no other
    /// write waits long behind it, then returns the freed pages to the file system
    /// (`incremental_vacuum`: the file shrinks).
    public func prune(_ retention: Retention, now: Date, batch: Int = 500) async throws -> PruneReport {
        try await prune(retention, ages: StampAges(now: now), batch: batch)
    }

    /// Prunes what is older than `retention` keeps by `ages`: across the steps of the wall clock
    /// forward it names, by the time that really passed.
    public func prune(_ retention: Retention, ages: StampAges, batch: Int = 500) async throws -> PruneReport {
        func older(_ column: String, than age: Duration) -> (sql: String, arguments: StatementArguments) {
            ages.condition(column, olderThan: age)
        }
        var report = PruneReport()
        let closed = older("closedAt", than: retention.history)
        report.events = try await deleteInBatches(
            from: "event", where: "closedAt IS NOT NULL AND \(closed.sql)", closed.arguments, batch: batch)
        // The very term of the partial index push_settledByApp (migration boundedGrowth): SQLite
        // uses a partial index only for a query that names its condition as written.
        let settled =
            "state IN ('\(PushState.delivered.rawValue)', '\(PushState.replaced.rawValue)', "
            + "'\(PushState.dropped.rawValue)', '\(PushState.recorded.rawValue)')"
        let received = older("receivedAt", than: retention.history)
        report.pushes = try await deleteInBatches(
            from: "push", where: "\(settled) AND \(received.sql)", received.arguments, batch: batch)
        for (app, oldestKept) in try await oldestSettledPushesKept(retention.pushesKeptPerApp, settled: settled) {
            report.pushes += try await deleteInBatches(
                from: "push", where: "appId = ? AND id < ? AND \(settled)", [app, oldestKept], batch: batch)
        }
        let ended = older("endedAt", than: max(retention.history, FetchYield.answerMemory))
        report.runs = try await deleteInBatches(
            from: "run",
            where: """
                outcome IS NOT NULL AND \(ended.sql)
                AND id NOT IN (SELECT r.id FROM run r WHERE r.appId = run.appId ORDER BY r.id DESC LIMIT ?)
                AND id NOT IN (SELECT r.id FROM run r WHERE r.appId = run.appId AND \(Self.fetchLikeRuns)
                    ORDER BY r.id DESC LIMIT ?)
                AND id NOT IN (SELECT runId FROM event WHERE closedAt IS NULL AND runId IS NOT NULL)
                AND id NOT IN (SELECT runId FROM push WHERE runId IS NOT NULL AND state IN ('\(PushState.queued.rawValue)', '\(PushState.delivering.rawValue)'))
                AND id NOT IN (SELECT runId FROM taskRequest WHERE runId IS NOT NULL)
                """,
            ended.arguments + [retention.runsKeptPerApp, retention.runsKeptPerApp], batch: batch)
        let finished = older("finishedAt", than: retention.history)
        report.transfers = try await deleteInBatches(
            from: "transfer",
            where: """
                state IN ('\(TransferState.completed.rawValue)', '\(TransferState.failed.rawValue)', '\(TransferState.cancelled.rawValue)')
                AND \(finished.sql)
                AND id NOT IN (SELECT transferId FROM (
                    SELECT json_extract(body, '$.transferCompleted.transfer') AS transferId FROM event
                    WHERE closedAt IS NULL AND kind = 'transferCompleted'
                    UNION ALL
                    SELECT json_extract(body, '$.downloadFinished.transfer') FROM event
                    WHERE closedAt IS NULL AND kind = 'downloadFinished') WHERE transferId IS NOT NULL)
                """,
            finished.arguments, batch: batch)
        let revoked = older("revokedAt", than: retention.history)
        report.deviceTokens = try await deleteInBatches(
            from: "deviceToken", where: "revokedAt IS NOT NULL AND \(revoked.sql)", revoked.arguments, batch: batch)
        let opened = older("openedAt", than: retention.opens)
        report.opens = try await deleteInBatches(from: "usage", where: opened.sql, opened.arguments, batch: batch)
        report.pagesFreed = try await writer.writeWithoutTransaction { db in
            let free = try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0
            try db.execute(sql: "PRAGMA incremental_vacuum")
            let freed = free - (try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0)
            // Every page the vacuum moved went through the log: emptied now (readers willing),
            // and the file cut to `walSizeLimit`, rather than kept at its peak.
            if freed > 0 { try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
            return freed
        }
        return report
    }

    /// The file's pages in use and free (`bgctl status`, the soak benchmark).
    public func pageCounts() async throws -> (pages: Int, free: Int, pageSize: Int) {
        try await writer.read { db in
            (
                try Int.fetchOne(db, sql: "PRAGMA page_count") ?? 0,
                try Int.fetchOne(db, sql: "PRAGMA freelist_count") ?? 0,
                try Int.fetchOne(db, sql: "PRAGMA page_size") ?? 0
            )
        }
    }

    /// For each app with more than `kept` settled pushes, the id of the oldest one kept.
    private func oldestSettledPushesKept(_ kept: Int, settled: String) async throws -> [(String, Int64)] {
        try await writer.read { db in
            try Row.fetchAll(
                db,
                sql: """
                    SELECT appId, (SELECT id FROM push p WHERE p.appId = apps.appId AND \(settled)
                                   ORDER BY id DESC LIMIT 1 OFFSET ?) AS oldestKept
                    FROM (SELECT DISTINCT appId FROM push) AS apps
                    """,
                arguments: [kept - 1]
            )
            .compactMap { row in (row["oldestKept"] as Int64?).map { (row["appId"], $0) } }
        }
    }

    private func deleteInBatches(
        from table: String, where condition: String, _ arguments: StatementArguments, batch: Int
    ) async throws -> Int {
        var total = 0
        while true {
            let deleted = try await writer.write { db in
                try db.execute(
                    sql: "DELETE FROM \(table) WHERE rowid IN (SELECT rowid FROM \(table) WHERE \(condition) LIMIT ?)",
                    arguments: arguments + [batch])
                return db.changesCount
            }
            total += deleted
            if deleted < batch { return total }
            await Task.yield()
        }
    }
}
