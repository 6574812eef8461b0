import BackgroundModel
import BackgroundPolicy
import Foundation
import GRDB

extension BackgroundStore {
    /// Starts a fetch run and queues its event for the app, in one transaction.
    ///
    /// Throws `StoreError.runAlreadyInFlight` when the app has a run in flight (the schema's
    /// partial unique index enforces it even against a racing caller).
    public func startFetchRun(
        for id: AppID, trigger: RunTrigger, reasons: [DecisionReason], budget: Duration, now: Date
    ) async throws -> (run: RunRecord, event: AppEvent) {
        do {
            return try await writer.write { db in
                guard try AppRow.fetchOne(db, key: id.rawValue) != nil else { throw StoreError.appNotFound(id) }
                var run = RunRow(
                    id: nil, appId: id.rawValue, kind: "fetch", trigger: trigger.rawValue,
                    reasons: ColumnJSON.encode(reasons), startedAt: now, deadline: now.adding(budget),
                    endedAt: nil, outcome: nil, launched: false, pid: nil, pidStartTicks: nil, detail: nil)
                try run.insert(db)
                let event = try appendEvent(.fetch(run: RunID(run.id!), budget: budget), for: id, runId: run.id, now: now, db: db)
                return (try RunRecord(row: run), event)
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.runAlreadyInFlight(id)
        }
    }

    /// Starts a run for a background push: the run, the app's event, the push marked delivered
    /// and the app's throttle allowance after this wake, in one transaction.
    public func startPushRun(
        for id: AppID, push: Int64, payload: String, reasons: [DecisionReason], allowance: PushThrottle.Allowance?, budget: Duration, now: Date
    ) async throws -> RunRecord {
        do {
            return try await writer.write { db in
                guard try AppRow.fetchOne(db, key: id.rawValue) != nil else { throw StoreError.appNotFound(id) }
                var run = RunRow(
                    id: nil, appId: id.rawValue, kind: "push", trigger: RunTrigger.remoteNotification.rawValue,
                    reasons: ColumnJSON.encode(reasons), startedAt: now, deadline: now.adding(budget),
                    endedAt: nil, outcome: nil, launched: false, pid: nil, pidStartTicks: nil, detail: nil)
                try run.insert(db)
                try appendEvent(.remoteNotification(run: RunID(run.id!), payload: payload, budget: budget), for: id, runId: run.id, now: now, db: db)
                let why = reasons.first { $0.code == .pushWake }?.detail ?? "woke the app"
                try db.execute(
                    sql: "UPDATE push SET state = 'delivered', reasonCode = ?, reason = ? WHERE id = ?",
                    arguments: [ReasonCode.pushWake.rawValue, "\(why), in run \(run.id!)", push])
                if let allowance { try Self.savePushAllowance(allowance, of: id, db: db) }
                return try RunRecord(row: run)
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.runAlreadyInFlight(id)
        }
    }

    /// Records the process bgd started for a run, so a restarted bgd can end an orphan.
    public func recordLaunch(of run: RunID, processID: Int32, startTicks: Int64?) async throws {
        try await writer.write { db in
            try db.execute(
                sql: "UPDATE run SET launched = 1, pid = ?, pidStartTicks = ? WHERE id = ?",
                arguments: [processID, startTicks, run.rawValue])
        }
    }

    /// Ends a run in flight and settles its event, in one transaction. Returns nil (and changes
    /// nothing) when the run has already ended: the first outcome recorded wins.
    @discardableResult
    public func finishRun(_ id: RunID, outcome: RunOutcome, detail: String? = nil, now: Date) async throws -> RunRecord? {
        try await writer.write { db in
            guard var row = try RunRow.fetchOne(db, key: id.rawValue) else { throw StoreError.runNotFound(id) }
            guard row.outcome == nil else { return nil }
            row.outcome = outcome.rawValue
            row.endedAt = max(now, row.startedAt)
            row.detail = detail ?? row.detail
            try row.update(db)
            try closeEvents(ofRun: id, db: db, now: now)
            return try RunRecord(row: row)
        }
    }

    public func run(_ id: RunID) async throws -> RunRecord? {
        try await writer.read { db in try RunRow.fetchOne(db, key: id.rawValue).map(RunRecord.init(row:)) }
    }

    /// The app's runs, newest first.
    public func runs(of id: AppID, limit: Int = 50) async throws -> [RunRecord] {
        try await writer.read { db in
            try RunRow.filter(RunRow.Columns.appId == id.rawValue)
                .order(RunRow.Columns.startedAt.desc, RunRow.Columns.id.desc)
                .limit(limit).fetchAll(db).map(RunRecord.init(row:))
        }
    }

    /// Every run in flight.
    public func runsInFlight() async throws -> [RunRecord] {
        try await writer.read { db in
            try RunRow.filter(RunRow.Columns.outcome == nil).order(RunRow.Columns.id).fetchAll(db)
                .map(RunRecord.init(row:))
        }
    }

    /// At start-up: every run that was in flight when bgd stopped is closed as `.interrupted`
    /// (its event settled, so it is not delivered late), and returned with the process bgd had
    /// started for it, so the caller can end an orphan.
    public func closeInterruptedRuns(now: Date) async throws -> [InterruptedRun] {
        try await writer.write { db in
            let rows = try RunRow.filter(RunRow.Columns.outcome == nil).fetchAll(db)
            var closed: [InterruptedRun] = []
            for var row in rows {
                row.outcome = RunOutcome.interrupted.rawValue
                row.endedAt = max(now, row.startedAt)
                row.detail = "bgd stopped while the run was in flight"
                try row.update(db)
                try closeEvents(ofRun: RunID(row.id!), db: db, now: now)
                closed.append(
                    InterruptedRun(
                        run: try RunRecord(row: row), processID: row.pid.map { Int32($0) }, startTicks: row.pidStartTicks))
            }
            return closed
        }
    }

    /// The snapshot the fetch policy plans from: each app's last `recentRunLimit` finished runs,
    /// and its `.newData`/`.noData` answers since `answersSince` (at most `answerLimit`, newest).
    public func fetchCandidates(
        recentRunLimit: Int = 8, answersSince: Date? = nil, answerLimit: Int = 500
    ) async throws -> [FetchCandidate] {
        try await writer.read { db in
            let apps = try AppRow.order(AppRow.Columns.id).fetchAll(db)
            return try apps.map { row in
                let app = try StoredApp(row: row)
                let runs = try RunRow.filter(RunRow.Columns.appId == row.id)
                    .order(RunRow.Columns.startedAt.desc, RunRow.Columns.id.desc)
                    .limit(recentRunLimit + 1).fetchAll(db)
                let finished = runs.compactMap { run in
                    run.outcome.flatMap(RunOutcome.init(rawValue:)).map {
                        FetchCandidate.FinishedRun(id: run.id.map(RunID.init), startedAt: run.startedAt, outcome: $0)
                    }
                }
                var answers: [FetchCandidate.Answer] = []
                if let answersSince {
                    answers = try RunRow.filter(RunRow.Columns.appId == row.id)
                        .filter([RunOutcome.newData.rawValue, RunOutcome.noData.rawValue].contains(RunRow.Columns.outcome))
                        .filter(RunRow.Columns.startedAt >= answersSince)
                        .order(RunRow.Columns.startedAt.desc).limit(answerLimit).fetchAll(db)
                        .map { FetchCandidate.Answer(at: $0.startedAt, broughtNewData: $0.outcome == RunOutcome.newData.rawValue) }
                }
                var candidate = FetchCandidate(
                    app: app.id, interval: app.fetchInterval, registeredAt: app.registeredAt,
                    recentRuns: Array(finished.prefix(recentRunLimit)), isRunning: runs.contains { $0.outcome == nil },
                    answers: answers)
                candidate.notBefore = try Date.fetchOne(
                    db, sql: "SELECT earliestBeginDate FROM taskRequest WHERE appId = ? AND kind = 'appRefresh'", arguments: [row.id])
                return candidate
            }
        }
    }
}

/// A run found in flight at start-up, with the process bgd had launched for it.
public struct InterruptedRun: Hashable, Sendable {
    public var run: RunRecord
    public var processID: Int32?
    public var startTicks: Int64?
}

extension RunRecord {
    init(row: RunRow) throws {
        guard let app = AppID(rawValue: row.appId), let trigger = RunTrigger(rawValue: row.trigger) else {
            throw StoreCorruption("run \(row.id ?? -1)")
        }
        self.init(
            id: RunID(row.id ?? 0), app: app, trigger: trigger, startedAt: row.startedAt, deadline: row.deadline,
            endedAt: row.endedAt, outcome: row.outcome.flatMap(RunOutcome.init(rawValue:)),
            reasons: try ColumnJSON.decode([DecisionReason].self, from: row.reasons), launched: row.launched,
            detail: row.detail, processID: row.pid.map { Int32(truncatingIfNeeded: $0) }, taskIdentifier: row.taskIdentifier)
    }
}
