import BackgroundModel
import BackgroundPolicy
import Foundation
import GRDB

extension BackgroundStore {
    /// The runs the fetch policy learns from and anchors an app's next fetch on (SQL over the
    /// `run` table's columns): fetches and app-refresh tasks, which ride on fetch wakes.
    static let fetchLikeRuns =
        "(kind = '\(RunKind.fetch.rawValue)' OR (kind = '\(RunKind.task.rawValue)' AND taskKind = '\(TaskKind.appRefresh.rawValue)'))"

    /// Starts a run of any kind: the run, the app's event and what the run takes (a push, a task
    /// request, the throttle allowance) in one transaction — a `kill -9` leaves all or nothing.
    ///
    /// Throws `StoreError.appNotFound`, `taskRequestNotFound` when a task run finds no such
    /// request pending (of that kind), and `runAlreadyInFlight` when the app has a run in flight
    /// (the schema's partial unique index enforces it even against a racing caller).
    public func startRun(
        _ start: RunStart, for id: AppID, trigger: RunTrigger, reasons: [DecisionReason], budget: Duration, now: Date
    ) async throws -> RunRecord {
        do {
            return try await writer.write { db in
                guard try AppRow.fetchOne(db, key: id.rawValue) != nil else { throw StoreError.appNotFound(id) }
                var reasons = reasons
                if case .events = start {
                    let open =
                        try Int.fetchOne(
                            db, sql: "SELECT count(*) FROM event WHERE appId = ? AND closedAt IS NULL",
                            arguments: [id.rawValue]) ?? 0
                    reasons.insert(
                        DecisionReason(.transferEventsWaiting, "\(open) transfer event(s) wait for the app"), at: 0)
                }
                var run = RunRow(
                    id: nil, appId: id.rawValue, kind: start.kind.rawValue, trigger: trigger.rawValue,
                    reasons: ColumnJSON.encode(reasons), startedAt: now, deadline: now.adding(budget),
                    endedAt: nil, outcome: nil, launched: false, pid: nil, pidStartTicks: nil, detail: nil)
                if case .task(let identifier, let kind, _) = start {
                    run.taskIdentifier = identifier
                    run.taskKind = kind.rawValue
                }
                try run.insert(db)
                let runID = RunID(run.id!)
                switch start {
                case .fetch:
                    try appendEvent(.fetch(run: runID, budget: budget), for: id, runId: run.id, now: now, db: db)
                case .push(let push, let apnsID, let payload, let allowance):
                    try appendEvent(
                        .remoteNotification(run: runID, payload: payload, budget: budget, apnsID: apnsID), for: id,
                        runId: run.id, now: now, db: db)
                    try Self.takePush(push, for: runID, reasons: reasons, db: db)
                    if let allowance { try Self.savePushAllowance(allowance, of: id, db: db) }
                case .task(let identifier, let kind, let submittedAt):
                    try Self.takeTaskRequest(
                        identifier, kind: kind, submittedAt: submittedAt, of: id, for: runID, db: db)
                    try appendEvent(
                        .backgroundTask(run: runID, identifier: identifier, kind: kind, budget: budget), for: id,
                        runId: run.id, now: now, db: db)
                case .events:
                    break
                }
                return try RunRecord(row: run)
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.runAlreadyInFlight(id)
        }
    }

    /// The push goes in flight with its run; delivered only once the app's handler answers (`settleWork`).
    private static func takePush(_ push: PushID, for run: RunID, reasons: [DecisionReason], db: Database) throws {
        let why = reasons.first { $0.code == .pushWake }?.detail ?? "woke the app"
        try db.execute(
            sql:
                "UPDATE push SET state = '\(PushState.delivering.rawValue)', runId = ?, attempts = attempts + 1, reasonCode = ?, reason = ? WHERE id = ?",
            arguments: [run.rawValue, ReasonCode.pushWake.rawValue, "\(why), in run \(run)", push.rawValue])
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
    public func finishRun(
        _ id: RunID, outcome: RunOutcome, detail: String? = nil, usage: RunUsage? = nil, now: Date
    ) async throws -> RunRecord? {
        try await writer.write { db in
            guard var row = try RunRow.fetchOne(db, key: id.rawValue) else { throw StoreError.runNotFound(id) }
            guard row.outcome == nil else { return nil }
            row.outcome = outcome.rawValue
            row.cpuMicroseconds = usage?.cpuMicroseconds
            row.memoryPeakBytes = usage?.memoryPeakBytes
            row.endedAt = max(now, row.startedAt)
            row.detail = detail ?? row.detail
            try row.update(db)
            try closeEvents(ofRun: id, db: db, now: now)
            try settleWork(ofRun: id, outcome: outcome, db: db)
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
                try closeEvents(ofRun: RunID(row.id!), db: db, now: now)
                if let note = try settleWork(ofRun: RunID(row.id!), outcome: .interrupted, bgdDied: true, db: db) {
                    row.detail! += "; " + note
                }
                try row.update(db)
                closed.append(
                    InterruptedRun(
                        run: try RunRecord(row: row), processID: row.pid.map { Int32($0) },
                        startTicks: row.pidStartTicks))
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
            // Which runs the fetch policy learns from (docs/scheduling.md, "Which runs count"):
            // fetches and app-refresh tasks (which ride on fetch wakes). A push wake, a
            // processing task or a launch for transfer events neither anchors the next fetch nor
            // counts as trouble (nor is made up as a fetch when bgd stopped during it): each has
            // its own rule. Any run in flight holds the app's fetch back all the same.
            //
            // Each query is prepared once (GRDB's statement cache), not built again for every
            // app: made per app through the query interface (SQL generation and the authorizer
            // each time), a bgd with 1,000 apps spent ~0.4 s of CPU on them from its start
            // through its first planning passes, against ~0.04 s now (perf, session 26).
            let fetchLike = Self.fetchLikeRuns
            // Newest first by id, the order they were started in: a run stamped by a clock that
            // was days ahead must not stay "the last run" once the clock comes back (it made
            // every later run look older, and the interrupted one was made up again and again).
            let recentRuns = try db.cachedStatement(
                sql: "SELECT * FROM run WHERE appId = ? AND \(fetchLike) ORDER BY id DESC LIMIT ?")
            let otherRunInFlight = try db.cachedStatement(
                sql: "SELECT EXISTS (SELECT 1 FROM run WHERE appId = ? AND NOT \(fetchLike) AND outcome IS NULL)")
            let recentAnswers = try db.cachedStatement(
                sql: """
                    SELECT * FROM run WHERE appId = ? AND \(fetchLike) AND outcome IN (?, ?) AND startedAt >= ?
                    ORDER BY startedAt DESC LIMIT ?
                    """)
            let pendingRefresh = try db.cachedStatement(
                sql:
                    "SELECT identifier, earliestBeginDate FROM taskRequest WHERE appId = ? AND kind = ? AND runId IS NULL"
            )
            return try apps.map { row in
                let app = try StoredApp(row: row)
                let runs = try RunRow.fetchAll(recentRuns, arguments: [row.id, recentRunLimit + 1])
                let finished = runs.compactMap { run in
                    run.outcome.flatMap(RunOutcome.init(rawValue:)).map {
                        FetchCandidate.FinishedRun(
                            id: run.id.map(RunID.init), startedAt: run.startedAt, outcome: $0,
                            manual: run.trigger == RunTrigger.manual.rawValue)
                    }
                }
                var answers: [FetchCandidate.Answer] = []
                if let answersSince {
                    answers = try RunRow.fetchAll(
                        recentAnswers,
                        arguments: [
                            row.id, RunOutcome.newData.rawValue, RunOutcome.noData.rawValue, answersSince, answerLimit,
                        ]
                    ).map {
                        FetchCandidate.Answer(
                            at: $0.startedAt, broughtNewData: $0.outcome == RunOutcome.newData.rawValue)
                    }
                }
                let isRunning =
                    try runs.contains { $0.outcome == nil }
                    || (Bool.fetchOne(otherRunInFlight, arguments: [row.id]) ?? false)
                var candidate = FetchCandidate(
                    app: app.id, interval: app.fetchInterval, registeredAt: app.registeredAt,
                    recentRuns: Array(finished.prefix(recentRunLimit)),
                    isRunning: isRunning, answers: answers)
                if let refresh = try Row.fetchOne(pendingRefresh, arguments: [row.id, TaskKind.appRefresh.rawValue]) {
                    candidate.pendingRefreshTask = refresh["identifier"]
                    candidate.notBefore = refresh["earliestBeginDate"]
                }
                return candidate
            }
        }
    }
}

extension BackgroundStore {
    /// How many runs may end without the app's answer before a push is given up.
    public static let pushDeliveryAttempts = 3
    /// How many of a task request's runs may be cut short by bgd dying (not a stop it was asked
    /// for) before the request is given up.
    public static let taskRequestCrashLimit = 3

    /// What a run carried — a push, a task request — settles with the run's end, in the same
    /// transaction: delivered or done when the app answered; put back when the run was cut short
    /// before the app could answer (bgd stopped, the app crashed or could not start), so nothing
    /// acknowledged to a provider or an app is lost to a crash.
    ///
    /// `bgdDied`: the run was found in flight at start-up (bgd was killed, crashed, lost power),
    /// not ended by a stop bgd was asked for. Returns what became of a task request it carried
    /// when that is worth saying in the run's detail.
    @discardableResult
    func settleWork(ofRun run: RunID, outcome: RunOutcome, bgdDied: Bool = false, db: Database) throws -> String? {
        switch outcome {
        case .eventsHandled:
            return nil  // a run for transfer events carries no push and no task
        case .newData, .noData, .failed, .cancelled:
            try db.execute(
                sql:
                    "UPDATE push SET state = '\(PushState.delivered.rawValue)' WHERE runId = ? AND state = '\(PushState.delivering.rawValue)'",
                arguments: [run.rawValue])
        case .expired:
            // The handler ran and was cut off: a push that takes longer than its budget would only do so again.
            try db.execute(
                sql:
                    "UPDATE push SET state = '\(PushState.dropped.rawValue)', reasonCode = ?, reason = ? WHERE runId = ? AND state = '\(PushState.delivering.rawValue)'",
                arguments: [
                    ReasonCode.pushUndeliverable.rawValue,
                    "the app's handler did not answer within its budget in run \(run)", run.rawValue,
                ])
        case .interrupted, .crashed, .launchFailed:
            let why =
                outcome == .interrupted
                ? "bgd stopped during run \(run)" : "run \(run) ended as \(outcome.rawValue) before the app answered"
            try db.execute(
                sql: """
                    UPDATE push SET runId = NULL,
                        state = CASE WHEN attempts < ? THEN '\(PushState.queued.rawValue)' ELSE '\(PushState.dropped.rawValue)' END,
                        reasonCode = CASE WHEN attempts < ? THEN ? ELSE ? END,
                        reason = CASE WHEN attempts < ? THEN ? || '; it goes again' ELSE ? || '; given up after ' || attempts || ' tries' END
                    WHERE runId = ? AND state = '\(PushState.delivering.rawValue)'
                    """,
                arguments: [
                    Self.pushDeliveryAttempts, Self.pushDeliveryAttempts, ReasonCode.pushRetry.rawValue,
                    ReasonCode.pushUndeliverable.rawValue,
                    Self.pushDeliveryAttempts, why, why, run.rawValue,
                ])
        }
        return try settleTaskRequest(ofRun: run, outcome: outcome, bgdDied: bgdDied, db: db)
    }

    /// The task request a run carried: done when the run ended any way but bgd's stop. bgd's own
    /// stop is no fault of the task, and its request is pending again. (A request the app submitted
    /// meanwhile under the same identifier replaced this row, and stands.) Two things keep it from
    /// coming back:
    /// - a task during whose runs bgd dies (the OOM killer, a watchdog, a power cut)
    ///   `taskRequestCrashLimit` times in a row is given up; put back every time, it started again
    ///   at every start of bgd, for ever. The count is kept by the app's request under the
    ///   identifier, the one that replaced the run's included (an app submits again at each
    ///   launch); a run of it that ends any other way than by bgd's stop starts it over;
    /// - an identifier the app no longer declares, or a refresh request once background refresh is
    ///   off, which the app changed while it ran, goes as a pending one would have.
    private func settleTaskRequest(
        ofRun run: RunID, outcome: RunOutcome, bgdDied: Bool, db: Database
    ) throws
        -> String?
    {
        guard
            let carried = try Row.fetchOne(
                db, sql: "SELECT appId, taskIdentifier FROM run WHERE id = ? AND taskIdentifier IS NOT NULL",
                arguments: [run.rawValue])
        else { return nil }
        let (app, identifier): (String, String) = (carried["appId"], carried["taskIdentifier"])
        let same = "appId = ? AND identifier = ? AND (runId = ? OR runId IS NULL)"
        let arguments: StatementArguments = [app, identifier, run.rawValue]
        guard outcome == .interrupted else {
            try db.execute(sql: "DELETE FROM taskRequest WHERE runId = ?", arguments: [run.rawValue])
            try db.execute(sql: "UPDATE taskRequest SET crashes = 0 WHERE \(same)", arguments: arguments)
            return nil
        }
        if bgdDied {
            try db.execute(sql: "UPDATE taskRequest SET crashes = crashes + 1 WHERE \(same)", arguments: arguments)
            let crashes = try Int.fetchOne(
                db, sql: "SELECT crashes FROM taskRequest WHERE \(same)", arguments: arguments)
            if let crashes, crashes >= Self.taskRequestCrashLimit {
                try db.execute(sql: "DELETE FROM taskRequest WHERE \(same)", arguments: arguments)
                return "task request \(identifier) given up: bgd died during \(crashes) of its runs in a row"
            }
        }
        try db.execute(sql: "UPDATE taskRequest SET runId = NULL WHERE runId = ?", arguments: [run.rawValue])
        if let row = try AppRow.fetchOne(db, key: app) {
            try Self.dropTaskRequestsNoLongerAllowed(for: try StoredApp(row: row), db)
        }
        return nil
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
            detail: row.detail, processID: row.pid.map { Int32(truncatingIfNeeded: $0) },
            taskIdentifier: row.taskIdentifier,
            cpuMicroseconds: row.cpuMicroseconds, memoryPeakBytes: row.memoryPeakBytes,
            kind: RunKind(rawValue: row.kind))
    }
}
