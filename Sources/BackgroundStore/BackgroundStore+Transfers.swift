import BackgroundModel
import BackgroundPolicy
import Foundation
import GRDB

/// A transfer with everything the TransferService needs to carry it on after a restart.
public struct StoredTransfer: Hashable, Sendable {
    public var record: TransferRecord
    public var request: TransferRequest
    /// The durable checkpoint: the only basis for appending.
    public var checkpoint: DownloadCheckpoint
    /// Downloads: where the bytes go until the end. Uploads: bgd's copy of the file.
    public var partialPath: String
    public var consecutiveFailures: Int
    /// The last time bytes moved (or the transfer was handed over).
    public var lastProgressAt: Date
}

/// How a transfer ended.
public enum TransferEnding: Hashable, Sendable {
    /// Done; a download's file is at `location` (moved there before this is recorded).
    case completed(location: String?, statusCode: Int?)
    case failed(TransferError, statusCode: Int?)
    case cancelled
}

extension BackgroundStore {
    /// Records a transfer handed over; `paths` gives its partial file (and destination) from its id,
    /// inside the transaction (it may put a file in place there: what it throws undoes it all).
    public func createTransfer(
        _ request: TransferRequest, app: AppID?, now: Date,
        paths: @escaping @Sendable (TransferID) throws -> (partial: String, destination: String?)
    ) async throws -> StoredTransfer {
        try await writer.write { db in
            if let app, try AppRow.fetchOne(db, key: app.rawValue) == nil { throw StoreError.appNotFound(app) }
            var row = TransferRow(
                id: nil, appId: app?.rawValue, session: request.session, request: ColumnJSON.encode(request),
                state: TransferState.waiting.rawValue, bytesDone: 0, bytesHighest: 0, bytesTotal: nil, validator: nil,
                attempts: 0,
                restarts: 0,
                consecutiveFailures: 0, nextAttemptAt: request.earliestBegin, waitingReason: "queued", lastError: nil,
                error: nil,
                statusCode: nil, partialPath: "", destination: nil, createdAt: now, lastProgressAt: now, finishedAt: nil
            )
            try row.insert(db)
            let location = try paths(TransferID(row.id!))
            row.partialPath = location.partial
            row.destination = location.destination
            try row.update(db)
            return try StoredTransfer(row: row)
        }
    }

    public func transfer(_ id: TransferID) async throws -> StoredTransfer? {
        try await writer.read { db in try TransferRow.fetchOne(db, key: id.rawValue).map(StoredTransfer.init(row:)) }
    }

    /// Transfers bgd must carry on: not ended and not paused.
    public func activeTransfers() async throws -> [StoredTransfer] {
        try await writer.read { db in
            try TransferRow.filter(
                [TransferState.waiting.rawValue, TransferState.running.rawValue].contains(TransferRow.Columns.state)
            )
            .order(TransferRow.Columns.id).fetchAll(db).map(StoredTransfer.init(row:))
        }
    }

    /// Every transfer that has not ended (waiting, running or paused) — whose files bgd keeps —
    /// and the highest id ever given, read together: a transfer made after this read has a
    /// higher one (ids are never reused), so its file is told from an ended transfer's.
    public func outstandingTransferIDs() async throws -> (outstanding: Set<TransferID>, highest: TransferID) {
        try await writer.read { db -> (outstanding: Set<TransferID>, highest: TransferID) in
            let ongoing = TransferState.allCases.filter { !$0.isFinal }.map(\.rawValue)
            let request = TransferRow.filter(ongoing.contains(TransferRow.Columns.state)).select(TransferRow.Columns.id)
            let outstanding: [Int64] = try Int64.fetchAll(db, request)
            let highest = try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'transfer'") ?? 0
            return (Set(outstanding.map { TransferID($0) }), TransferID(highest))
        }
    }

    /// Where the operator's ended downloads kept their partial files: beside their destinations,
    /// in directories bgd does not list. A file still there is what a crash between an ending and
    /// its file's removal left (a completed one's was moved into place).
    public func endedOperatorPartialPaths() async throws -> [String] {
        try await writer.read { db in
            let ended = TransferState.allCases.filter(\.isFinal).map(\.rawValue)
            return try String.fetchAll(
                db,
                TransferRow.filter(TransferRow.Columns.appId == nil && TransferRow.Columns.destination != nil)
                    .filter(ended.contains(TransferRow.Columns.state)).select(TransferRow.Columns.partialPath))
        }
    }

    /// How many of the app's transfers have not ended (waiting, running or paused).
    public func outstandingTransferCount(of app: AppID) async throws -> Int {
        try await writer.read { db in
            try TransferRow.filter(TransferRow.Columns.appId == app.rawValue)
                .filter(
                    TransferState.allCases.filter { !$0.isFinal }.map(\.rawValue).contains(TransferRow.Columns.state)
                )
                .fetchCount(db)
        }
    }

    /// Transfers, newest first: one app's (one session's), or everyone's.
    public func transfers(app: AppID? = nil, session: String? = nil, limit: Int = 200) async throws -> [TransferRecord]
    {
        try await writer.read { db in
            var query = TransferRow.all()
            if let app { query = query.filter(TransferRow.Columns.appId == app.rawValue) }
            if let session { query = query.filter(TransferRow.Columns.session == session) }
            return try query.order(TransferRow.Columns.id.desc).limit(limit).fetchAll(db).map {
                try StoredTransfer(row: $0).record
            }
        }
    }

    /// An attempt starts: counted before it runs, so a transfer that crashes bgd is not retried forever.
    public func startAttempt(_ id: TransferID) async throws -> StoredTransfer? {
        try await update(id, onlyIf: [.waiting, .running]) { row in
            row.state = TransferState.running.rawValue
            row.attempts += 1
            row.waitingReason = nil
            row.nextAttemptAt = nil
        }
    }

    /// Bytes up to `checkpoint.offset` are synced: they will not be fetched again (for an upload
    /// the server took: all of it, with its answer's status). Only bytes beyond those already
    /// kept are progress, which ends a run of failures and holds off `noProgress`: a checkpoint
    /// saved as an answer's headers arrive, or again after a body that broke before its first
    /// byte, is none — else a server that always answers and then drops the connection was
    /// retried at the first backoff's pace for ever and never failed for lack of progress.
    public func saveCheckpoint(
        _ id: TransferID, _ checkpoint: DownloadCheckpoint, restarted: Bool, statusCode: Int? = nil, now: Date
    ) async throws {
        _ = try await update(id) { row in
            if restarted { row.restarts += 1 }
            if let statusCode { row.statusCode = statusCode }
            // A body smaller than the most held is another file (it changed on the server): its
            // bytes are new, and the mark starts again.
            if restarted, let total = checkpoint.total, total < row.bytesHighest { row.bytesHighest = 0 }
            // Beyond the most it ever held: bytes fetched again after a restart from zero (a
            // server that ignores Range) are none, or one that drops every connection half-way
            // is asked for the whole file again at the first backoff's pace, for ever.
            if checkpoint.offset > max(row.bytesDone, row.bytesHighest) {
                row.consecutiveFailures = 0
                row.lastProgressAt = now
            }
            row.bytesHighest = max(row.bytesHighest, checkpoint.offset)
            row.bytesDone = checkpoint.offset
            row.bytesTotal = checkpoint.total
            row.validator = checkpoint.validator.map(ColumnJSON.encode)
        }
    }

    /// Throws the checkpoint away: the next attempt starts from byte 0.
    public func discardCheckpoint(_ id: TransferID, reason: String) async throws {
        _ = try await update(id) { row in
            row.bytesDone = 0
            row.bytesTotal = nil
            row.validator = nil
            row.restarts += 1
            row.lastError = reason
        }
    }

    /// The attempt failed in a way worth retrying, at `nextAttemptAt`.
    /// False when there is nothing to retry: the transfer is gone (its app unregistered) or ended.
    @discardableResult
    public func scheduleRetry(_ id: TransferID, error: String, at nextAttemptAt: Date) async throws -> Bool {
        try await update(id) { row in
            row.state = TransferState.waiting.rawValue
            row.consecutiveFailures += 1
            row.lastError = error
            row.nextAttemptAt = nextAttemptAt
            row.waitingReason = "retrying after: \(error)"
        } != nil
    }

    /// Says why a waiting transfer waits (its turn, conditions); written only when it changes,
    /// and true then (it was running, or waiting for another reason). An ended one stays ended.
    @discardableResult
    public func setWaiting(_ id: TransferID, reason: String) async throws -> Bool {
        try await writer.write { db in
            try db.execute(
                sql:
                    "UPDATE transfer SET state = ?, waitingReason = ? WHERE id = ? AND state IN (?, ?) AND (waitingReason IS NOT ? OR state != ?)",
                arguments: [
                    TransferState.waiting.rawValue, reason, id.rawValue, TransferState.waiting.rawValue,
                    TransferState.running.rawValue,
                    reason, TransferState.waiting.rawValue,
                ])
            return db.changesCount > 0
        }
    }

    /// Ends a transfer and, for an app's, queues its events — in one transaction, so the app
    /// hears of every ending exactly once. Nil (nothing changes) when it had already ended.
    public func finishTransfer(
        _ id: TransferID, _ ending: TransferEnding, now: Date, onlyIf states: Set<TransferState>? = nil
    ) async throws -> TransferRecord? {
        try await writer.write { db in
            guard var row = try TransferRow.fetchOne(db, key: id.rawValue) else { return nil }
            guard let state = TransferState(rawValue: row.state), !state.isFinal else { return nil }
            if let states, !states.contains(state) { return nil }
            let request = try ColumnJSON.decode(TransferRequest.self, from: row.request)
            var error: TransferError?
            var statusCode: Int?
            switch ending {
            case .completed(let location, let status):
                row.state = TransferState.completed.rawValue
                statusCode = status
                if request.destination == nil, let location { row.destination = location }
            case .failed(let failure, let status):
                row.state = TransferState.failed.rawValue
                error = failure
                statusCode = status
            case .cancelled:
                row.state = TransferState.cancelled.rawValue
                error = TransferError(.cancelled, "cancelled")
            }
            row.error = error.map(ColumnJSON.encode)
            row.statusCode = statusCode
            row.finishedAt = now
            row.waitingReason = nil
            row.nextAttemptAt = nil
            try row.update(db)
            if let appId = row.appId, let app = AppID(rawValue: appId) {
                let transfer = TransferID(row.id!)
                if case .completed(let location?, _) = ending, request.kind == .download {
                    try appendEvent(
                        .downloadFinished(
                            transfer: transfer, session: row.session, taskDescription: request.taskDescription,
                            location: location),
                        for: app, now: now, db: db)
                }
                try appendEvent(
                    .transferCompleted(
                        transfer: transfer, session: row.session, taskDescription: request.taskDescription,
                        statusCode: statusCode,
                        error: error),
                    for: app, now: now, db: db)
                let others = try TransferRow.filter(
                    TransferRow.Columns.appId == appId && TransferRow.Columns.session == row.session
                )
                .filter(
                    [TransferState.waiting.rawValue, TransferState.running.rawValue].contains(TransferRow.Columns.state)
                )
                .fetchCount(db)
                if others == 0 {
                    try appendEvent(.sessionEventsFinished(session: row.session), for: app, now: now, db: db)
                }
            }
            return try StoredTransfer(row: row).record
        }
    }

    /// `cancel(byProducingResumeData:)`: kept with its checkpoint, not carried on. `reason` says
    /// who paused it (the app, or the operator with `bgctl transfers pause`). A pause and a resume
    /// count as progress (`lastProgressAt`): a transfer resumed after a pause longer than the
    /// no-progress timeout failed as stalled at once, and one paused just now after days of
    /// waiting for its begin date was taken for a pause left that long.
    public func pauseTransfer(_ id: TransferID, reason: String = "paused", now: Date) async throws -> StoredTransfer? {
        try await update(id, onlyIf: [.waiting, .running]) { row in
            row.state = TransferState.paused.rawValue
            row.waitingReason = reason
            row.lastProgressAt = max(row.lastProgressAt, now)
        }
    }

    /// The transfers paused with no progress for `age` (by `ages`): an app that paused one and
    /// threw its resume data away left it, with its partial file, for good.
    public func pausedTransfers(idleFor age: Duration, ages: StampAges) async throws -> [TransferID] {
        let idle = ages.condition("lastProgressAt", olderThan: age)
        var arguments: StatementArguments = [TransferState.paused.rawValue]
        arguments += idle.arguments
        let ids = try await writer.read { [arguments] db in
            try Int64.fetchAll(
                db, sql: "SELECT id FROM transfer WHERE state = ? AND \(idle.sql) ORDER BY id", arguments: arguments)
        }
        return ids.map { TransferID($0) }
    }

    public func resumeTransfer(_ id: TransferID, now: Date) async throws -> StoredTransfer? {
        try await update(id, onlyIf: [.paused]) { row in
            row.state = TransferState.waiting.rawValue
            row.waitingReason = "resumed"
            row.nextAttemptAt = nil
            row.lastProgressAt = max(row.lastProgressAt, now)
        }
    }

    /// A waiting or paused transfer goes at its next look, its retry time forgotten (`bgctl
    /// transfers retry`); its failures still count towards the backoff after this attempt.
    public func retryTransferNow(_ id: TransferID) async throws -> StoredTransfer? {
        try await update(id, onlyIf: [.waiting, .paused]) { row in
            row.state = TransferState.waiting.rawValue
            row.waitingReason = "retrying now, as asked"
            row.nextAttemptAt = nil
        }
    }

    /// Changes a transfer that is not final (or in one of `states`); nil when there is none.
    private func update(
        _ id: TransferID, onlyIf states: Set<TransferState>? = nil,
        _ change: @escaping @Sendable (inout TransferRow) -> Void
    ) async throws -> StoredTransfer? {
        try await writer.write { db in
            guard var row = try TransferRow.fetchOne(db, key: id.rawValue),
                let state = TransferState(rawValue: row.state)
            else {
                return nil
            }
            if let states { guard states.contains(state) else { return nil } } else if state.isFinal { return nil }
            change(&row)
            try row.update(db)
            return try StoredTransfer(row: row)
        }
    }
}

extension StoredTransfer {
    init(row: TransferRow) throws {
        guard let state = TransferState(rawValue: row.state), let id = row.id else {
            throw StoreCorruption("transfer \(row.id ?? -1)")
        }
        let request = try ColumnJSON.decode(TransferRequest.self, from: row.request)
        let validator = try row.validator.map { try ColumnJSON.decode(DownloadCheckpoint.Validator.self, from: $0) }
        self.request = request
        checkpoint = DownloadCheckpoint(offset: row.bytesDone, total: row.bytesTotal, validator: validator)
        partialPath = row.partialPath
        consecutiveFailures = row.consecutiveFailures
        lastProgressAt = row.lastProgressAt
        record = TransferRecord(
            id: TransferID(id), app: row.appId.flatMap(AppID.init(rawValue:)), session: row.session, kind: request.kind,
            url: request.url,
            taskDescription: request.taskDescription, state: state, bytesTransferred: row.bytesDone,
            bytesExpected: row.bytesTotal,
            attempts: row.attempts, restarts: row.restarts, nextAttemptAt: row.nextAttemptAt,
            waitingReason: row.waitingReason,
            lastError: row.lastError, error: try row.error.map { try ColumnJSON.decode(TransferError.self, from: $0) },
            statusCode: row.statusCode, createdAt: row.createdAt, finishedAt: row.finishedAt,
            destination: row.destination ?? request.destination, isDiscretionary: request.isDiscretionary)
    }
}
