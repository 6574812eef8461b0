import BackgroundModel
import Foundation
import GRDB

extension BackgroundStore {
    /// The app's events not yet acknowledged or settled, oldest first: what a (re)connecting
    /// app is sent.
    public func openEvents(for id: AppID, after seq: EventSequence? = nil, limit: Int? = nil) async throws -> [AppEvent]
    {
        try await writer.read { db in
            var request = EventRow.filter(EventRow.Columns.appId == id.rawValue && EventRow.Columns.closedAt == nil)
                .filter(EventRow.Columns.seq > (seq?.rawValue ?? 0))
                .order(EventRow.Columns.seq)
            if let limit { request = request.limit(limit) }
            return try request.fetchAll(db).map(AppEvent.init(row:))
        }
    }

    /// How many events the app has not acknowledged: all of them, and those that belong to no
    /// run (a transfer's).
    public func openEventCounts(for id: AppID) async throws -> (all: Int, transfers: Int) {
        try await writer.read { db in
            let row = try Row.fetchOne(
                db,
                sql: "SELECT count(*), coalesce(sum(runId IS NULL), 0) FROM event WHERE appId = ? AND closedAt IS NULL",
                arguments: [id.rawValue])
            return (row?[0] ?? 0, row?[1] ?? 0)
        }
    }

    /// How many events the app has not acknowledged.
    public func openEventCount(for id: AppID) async throws -> Int {
        try await writer.read { db in
            try EventRow.filter(EventRow.Columns.appId == id.rawValue && EventRow.Columns.closedAt == nil).fetchCount(
                db)
        }
    }

    /// Acknowledges every event of the app up to and including `seq` (or, `only`, that one).
    /// Acknowledging again is harmless; returns how many events this call closed.
    @discardableResult
    public func acknowledge(
        upTo seq: EventSequence, only: Bool = false, for id: AppID, now: Date
    ) async throws -> Int {
        try await writer.write { db in
            try db.execute(
                sql: """
                    UPDATE event SET closedAt = ?, closedBy = 'app'
                    WHERE appId = ? AND seq \(only ? "=" : "<=") ? AND closedAt IS NULL
                    """,
                arguments: [now, id.rawValue, seq.rawValue])
            return db.changesCount
        }
    }

    /// The highest sequence number the app has been given (0 when none).
    public func lastEventSequence(for id: AppID) async throws -> EventSequence {
        try await writer.read { db in
            guard let row = try AppRow.fetchOne(db, key: id.rawValue) else { throw StoreError.appNotFound(id) }
            return EventSequence(row.lastEventSeq)
        }
    }

    /// The app's outbox, open and closed events, newest `limit` in order.
    public func outbox(for id: AppID, limit: Int = 100) async throws -> [OutboxEntry] {
        try await writer.read { db in
            try EventRow.filter(EventRow.Columns.appId == id.rawValue).order(EventRow.Columns.seq.desc).limit(limit)
                .fetchAll(db).reversed()
                .map { OutboxEntry(event: try AppEvent(row: $0), closedAt: $0.closedAt, closedBy: $0.closedBy) }
        }
    }

    /// Queues an event for the app with its next sequence number (inside the caller's transaction).
    @discardableResult
    func appendEvent(
        _ body: AppEvent.Body, for app: AppID, runId: Int64? = nil, now: Date, db: Database
    ) throws -> AppEvent {
        guard var appRow = try AppRow.fetchOne(db, key: app.rawValue) else { throw StoreError.appNotFound(app) }
        appRow.lastEventSeq += 1
        try appRow.update(db)
        let event = AppEvent(seq: EventSequence(appRow.lastEventSeq), createdAt: now, body: body)
        try EventRow(
            appId: app.rawValue, seq: appRow.lastEventSeq, kind: event.kind, body: ColumnJSON.encode(body),
            runId: runId, createdAt: now,
            closedAt: nil, closedBy: nil
        ).insert(db)
        return event
    }

    /// A run's events lose their point once the run has ended: settle them in the same transaction.
    func closeEvents(ofRun run: RunID, db: Database, now: Date) throws {
        try db.execute(
            sql: "UPDATE event SET closedAt = ?, closedBy = 'runEnded' WHERE runId = ? AND closedAt IS NULL",
            arguments: [now, run.rawValue])
    }
}

extension AppEvent {
    init(row: EventRow) throws {
        self.init(
            seq: EventSequence(row.seq), createdAt: row.createdAt,
            body: try ColumnJSON.decode(AppEvent.Body.self, from: row.body))
    }
}

extension BackgroundStore {
    /// Apps with events waiting that belong to no run (a transfer's), oldest first: after a
    /// restart nobody else would launch them to take these.
    public func appsWithWaitingSessionEvents() async throws -> [AppID] {
        try await writer.read { db in
            try String.fetchAll(
                db,
                sql:
                    "SELECT appId FROM event WHERE closedAt IS NULL AND runId IS NULL GROUP BY appId ORDER BY min(createdAt)"
            ).compactMap(AppID.init(rawValue:))
        }
    }
}

extension BackgroundStore {
    /// An app's event that waited unacknowledged until bgd stopped keeping it.
    public struct ExpiredEvent: Sendable, Equatable {
        public var app: AppID
        public var event: AppEvent
    }

    /// Closes, as `expired`, every event that belongs to no run (a transfer's, its session's) and
    /// that the app has left unacknowledged for `age` by `ages`; returns them. A run's events end
    /// with their run; these have nothing to end them, and an app whose handler always crashed
    /// before acknowledging kept each one, and the transfer it names, for good — and was
    /// relaunched to take them, for good. Closed, they are pruned like any other.
    public func expireSessionEvents(olderThan age: Duration, ages: StampAges) async throws -> [ExpiredEvent] {
        let created = ages.condition("createdAt", olderThan: age)
        return try await writer.write { db in
            let unclaimed = EventRow.filter(EventRow.Columns.closedAt == nil && EventRow.Columns.runId == nil)
                .filter(sql: created.sql, arguments: created.arguments)
            let rows = try unclaimed.order(EventRow.Columns.appId, EventRow.Columns.seq).fetchAll(db)
            try unclaimed.updateAll(
                db, Column("closedAt").set(to: ages.now), Column("closedBy").set(to: "expired"))
            return try rows.compactMap { row in
                guard let app = AppID(rawValue: row.appId) else { return nil }
                return ExpiredEvent(app: app, event: try AppEvent(row: row))
            }
        }
    }

    /// Moves on by `interval` the creation of every open event that belongs to no run and was
    /// created at or before `cutoff`: stamped by a wall clock that was `interval` behind (set
    /// forward since), it was created that much later than it says. Expiry
    /// (`expireSessionEvents`) counts from it, and would otherwise close such events — and
    /// remove the downloads they name — as soon as the clock was set right. How many moved.
    public func carryForwardSessionEvents(createdBy cutoff: Date, by interval: TimeInterval) async throws -> Int {
        try await writer.write { db in
            let rows = try EventRow.filter(
                EventRow.Columns.closedAt == nil && EventRow.Columns.runId == nil && Column("createdAt") <= cutoff
            ).fetchAll(db)
            for var row in rows {
                row.createdAt = row.createdAt.addingTimeInterval(interval)
                try row.update(db)
            }
            return rows.count
        }
    }

    /// The downloads whose `downloadFinished` expired unacknowledged (while the closed event is
    /// kept): the files the pruner removes, read from the store at every pass, so one a crash
    /// left after the expiry committed is removed at the next.
    public func expiredDownloads() async throws -> [(app: AppID, transfer: TransferID, location: String)] {
        try await writer.read { db in
            // The very terms of the partial index event_expiredDownload, as written.
            try EventRow.filter(sql: "closedBy = 'expired' AND kind = 'downloadFinished'").fetchAll(db).compactMap {
                row in
                guard let app = AppID(rawValue: row.appId),
                    case .downloadFinished(let transfer, _, _, let location) = try AppEvent(row: row).body
                else { return nil }
                return (app, transfer, location)
            }
        }
    }
}
