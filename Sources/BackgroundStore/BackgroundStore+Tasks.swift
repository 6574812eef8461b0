import BackgroundModel
import Foundation
import GRDB

extension BackgroundStore {
    /// Submits a `BGTaskScheduler` request with the real one's rules: only declared identifiers
    /// (`notPermitted`), no refresh tasks with background refresh off (`unavailable`), at most 1
    /// refresh and 10 processing requests pending (`tooManyPendingTaskRequests`); a request with
    /// the identifier of a pending one replaces it.
    public func submitTaskRequest(_ request: TaskRequest, for app: AppID, now: Date) async throws {
        try await writer.write { db in
            guard let row = try AppRow.fetchOne(db, key: app.rawValue) else { throw StoreError.appNotFound(app) }
            let stored = try StoredApp(row: row)
            guard stored.taskIdentifiers.contains(request.identifier) else { throw TaskSchedulerError.notPermitted }
            if request.kind == .appRefresh, stored.fetchInterval == .never { throw TaskSchedulerError.unavailable }
            let others =
                try Int.fetchOne(
                    db,
                    sql:
                        "SELECT count(*) FROM taskRequest WHERE appId = ? AND kind = ? AND identifier != ? AND runId IS NULL",
                    arguments: [app.rawValue, request.kind.rawValue, request.identifier]) ?? 0
            guard others < TaskRequest.limit(of: request.kind) else {
                throw TaskSchedulerError.tooManyPendingTaskRequests
            }
            // A request replacing another keeps its count of bgd's deaths (an app submits again
            // at each launch, the launch for its task included: a fresh count never reached the
            // limit), and is pending, whatever run took the one it replaces.
            try db.execute(
                sql: """
                    INSERT INTO taskRequest(appId, identifier, kind, earliestBeginDate, requiresNetwork, requiresPower, submittedAt)
                    VALUES (?, ?, ?, ?, ?, ?, ?)
                    ON CONFLICT(appId, identifier) DO UPDATE SET
                        kind = excluded.kind, earliestBeginDate = excluded.earliestBeginDate,
                        requiresNetwork = excluded.requiresNetwork, requiresPower = excluded.requiresPower,
                        submittedAt = excluded.submittedAt, runId = NULL
                    """,
                arguments: [
                    app.rawValue, request.identifier, request.kind.rawValue, request.earliestBeginDate,
                    request.requiresNetworkConnectivity,
                    request.requiresExternalPower, now,
                ])
        }
    }

    /// Cancels one pending request (nil identifier: all of the app's). Returns how many went.
    @discardableResult
    public func cancelTaskRequests(of app: AppID, identifier: String?) async throws -> Int {
        try await writer.write { db in
            if let identifier {
                try db.execute(
                    sql: "DELETE FROM taskRequest WHERE appId = ? AND identifier = ? AND runId IS NULL",
                    arguments: [app.rawValue, identifier])
            } else {
                try db.execute(
                    sql: "DELETE FROM taskRequest WHERE appId = ? AND runId IS NULL", arguments: [app.rawValue])
            }
            return db.changesCount
        }
    }

    /// Pending requests, of one app or of all, oldest first.
    public func pendingTaskRequests(of app: AppID? = nil) async throws -> [PendingTaskRequest] {
        try await writer.read { db in
            let rows =
                if let app {
                    try Row.fetchAll(
                        db,
                        sql:
                            "SELECT * FROM taskRequest WHERE appId = ? AND runId IS NULL ORDER BY submittedAt, identifier",
                        arguments: [app.rawValue])
                } else {
                    try Row.fetchAll(
                        db, sql: "SELECT * FROM taskRequest WHERE runId IS NULL ORDER BY submittedAt, appId, identifier"
                    )
                }
            return try rows.compactMap { row in
                guard let app = AppID(rawValue: row["appId"]), let kind = TaskKind(rawValue: row["kind"]) else {
                    return nil
                }
                return PendingTaskRequest(
                    app: app,
                    request: TaskRequest(
                        identifier: row["identifier"], kind: kind,
                        earliestBeginDate: try row.decode(forColumn: "earliestBeginDate"),
                        requiresNetworkConnectivity: row["requiresNetwork"], requiresExternalPower: row["requiresPower"]
                    ),
                    submittedAt: try row.decode(forColumn: "submittedAt"))
            }
        }
    }

    /// The pending request `identifier` is taken by `run`: marked with it until the run answers,
    /// not deleted, so a run cut short by bgd's stop gives it back. Throws
    /// `StoreError.taskRequestNotFound` when no such request (of that kind, and submitted at
    /// `submittedAt` when given) is pending. The submission time is matched to within 2 ms, not
    /// by equality: a date read back from the store and written again can lose its last
    /// millisecond (GRDB's text format), and an exact match then never held.
    static func takeTaskRequest(
        _ identifier: String, kind: TaskKind, submittedAt: Date?, of app: AppID, for run: RunID, db: Database
    ) throws {
        try db.execute(
            sql: """
                UPDATE taskRequest SET runId = ?
                WHERE appId = ? AND identifier = ? AND kind = ? AND runId IS NULL
                AND (? IS NULL OR abs(julianday(submittedAt) - julianday(?)) * 86400 < 0.002)
                """,
            arguments: [run.rawValue, app.rawValue, identifier, kind.rawValue, submittedAt, submittedAt])
        guard db.changesCount == 1 else { throw StoreError.taskRequestNotFound(app, identifier) }
    }

    /// Tasks being carried out now, with their runs.
    public func runningTasks() async throws -> [RunningTask] {
        try await writer.read { db in
            try RunRow.fetchAll(
                db, sql: "SELECT * FROM run WHERE kind = ? AND outcome IS NULL ORDER BY startedAt",
                arguments: [RunKind.task.rawValue]
            ).compactMap { row in
                guard let kind = row.taskKind.flatMap(TaskKind.init(rawValue:)), let identifier = row.taskIdentifier
                else { return nil }
                let run = try RunRecord(row: row)
                return RunningTask(app: run.app, identifier: identifier, kind: kind, run: run)
            }
        }
    }
}
