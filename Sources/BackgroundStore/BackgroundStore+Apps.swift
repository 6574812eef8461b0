import BackgroundModel
import Foundation
import GRDB

extension BackgroundStore {
    /// Registers an app. Throws `StoreError.appAlreadyRegistered` when the id is taken.
    public func register(_ request: RegisterAppRequest, tokenHash: String, now: Date) async throws -> StoredApp {
        let row = AppRow(
            id: request.id.rawValue,
            launchCommand: ColumnJSON.encode(request.launchCommand),
            fetchInterval: ColumnJSON.encode(request.fetchInterval ?? .never),
            tokenHash: tokenHash,
            lastEventSeq: 0,
            registeredAt: now,
            taskIdentifiers: ColumnJSON.encode(request.taskIdentifiers ?? []))
        do {
            try await writer.write { db in try row.insert(db) }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_CONSTRAINT {
            throw StoreError.appAlreadyRegistered(request.id)
        }
        return try StoredApp(row: row)
    }

    /// Gives the app a new token (its hash): the old one is refused from this commit on.
    public func setTokenHash(_ tokenHash: String, for id: AppID) async throws {
        try await writer.write { db in
            guard var row = try AppRow.fetchOne(db, key: id.rawValue) else { throw StoreError.appNotFound(id) }
            row.tokenHash = tokenHash
            try row.update(db)
        }
    }

    /// Changes what launches the app and which task identifiers it may submit, keeping everything
    /// else: its history, usage, outbox, device token, container and token (`bgctl register --replace`).
    public func replaceRegistration(_ request: RegisterAppRequest) async throws -> StoredApp {
        try await writer.write { db in
            guard var row = try AppRow.fetchOne(db, key: request.id.rawValue) else {
                throw StoreError.appNotFound(request.id)
            }
            row.launchCommand = ColumnJSON.encode(request.launchCommand)
            if let interval = request.fetchInterval { row.fetchInterval = ColumnJSON.encode(interval) }
            if let identifiers = request.taskIdentifiers { row.taskIdentifiers = ColumnJSON.encode(identifiers) }
            try row.update(db)
            let app = try StoredApp(row: row)
            try Self.dropTaskRequestsNoLongerAllowed(for: app, db)
            return app
        }
    }

    /// Pending `BGTaskScheduler` requests the app's new settings would refuse — an identifier no
    /// longer declared, a refresh request with background refresh now off — are dropped with
    /// the change. Kept, a refresh request waited for a wake that never comes, holding the one
    /// refresh slot; and a task ran under an identifier the app no longer handles.
    static func dropTaskRequestsNoLongerAllowed(for app: StoredApp, _ db: Database) throws {
        let declared = app.taskIdentifiers.map { _ in "?" }.joined(separator: ", ")
        var arguments: [any DatabaseValueConvertible] = [app.id.rawValue]
        arguments += app.taskIdentifiers
        // `NOT IN ()` is not SQL, and `NOT IN (NULL)` is never true: none declared, every one goes.
        var refused = declared.isEmpty ? "1" : "identifier NOT IN (\(declared))"
        if app.fetchInterval == .never {
            refused += " OR kind = ?"
            arguments.append(TaskKind.appRefresh.rawValue)
        }
        try db.execute(
            sql: "DELETE FROM taskRequest WHERE appId = ? AND runId IS NULL AND (\(refused))",
            arguments: StatementArguments(arguments))
    }

    /// Removes an app with its history, outbox and pushes. Returns false when it was not
    /// registered. Its pushes have no key to the app's row: left queued, each made the push
    /// dispatcher's pass fail on the app that was gone, and no app after it in name order was
    /// woken for a push again.
    /// Forgets an app, its queued pushes and push allowance, and revokes its device tokens (a push
    /// to one answers 410 from now) — in one transaction: a crash never leaves a registered app
    /// whose tokens providers were told are gone.
    public func unregister(_ id: AppID, now: Date) async throws -> Bool {
        let removed = try await writer.write { db in
            guard try AppRow.fetchOne(db, key: id.rawValue) != nil else { return false }
            try Self.revokeDeviceTokens(of: id, now: now, in: db)
            try AppRow.deleteOne(db, key: id.rawValue)
            try db.execute(sql: "DELETE FROM push WHERE appId = ?", arguments: [id.rawValue])
            try db.execute(sql: "DELETE FROM pushAllowance WHERE appId = ?", arguments: [id.rawValue])
            return true
        }
        if removed { pushCredentials.advance() }
        return removed
    }

    public func app(_ id: AppID) async throws -> StoredApp? {
        try await writer.read { db in try AppRow.fetchOne(db, key: id.rawValue).map(StoredApp.init(row:)) }
    }

    public func apps() async throws -> [StoredApp] {
        try await writer.read { db in try AppRow.order(AppRow.Columns.id).fetchAll(db).map(StoredApp.init(row:)) }
    }

    /// The app whose token hashes to `tokenHash`, if any.
    public func app(forTokenHash tokenHash: String) async throws -> AppID? {
        try await writer.read { db in
            try AppRow.filter(AppRow.Columns.tokenHash == tokenHash).fetchOne(db).flatMap { AppID(rawValue: $0.id) }
        }
    }

    /// Changes an app's minimum fetch interval, as `setMinimumBackgroundFetchInterval` does.
    public func setFetchInterval(_ interval: FetchInterval, for id: AppID) async throws {
        try await writer.write { db in
            guard var row = try AppRow.fetchOne(db, key: id.rawValue) else { throw StoreError.appNotFound(id) }
            row.fetchInterval = ColumnJSON.encode(interval)
            try row.update(db)
            try Self.dropTaskRequestsNoLongerAllowed(for: try StoredApp(row: row), db)
        }
    }

    /// Remembers that the user opened the app (the usage model learns from these). Opens of one
    /// app closer together than `openCoalescing` are one use of it: the later is not stored, and
    /// the answer is false. Switching back and forth is one session to every model here, and
    /// an app reporting opens in a loop would otherwise store rows without end (one client kept
    /// up 170 a second: 14.7M rows a day).
    @discardableResult
    public func recordOpen(of id: AppID, at date: Date) async throws -> Bool {
        try await writer.write { db in
            guard try AppRow.exists(db, key: id.rawValue) else { throw StoreError.appNotFound(id) }
            let near = try Bool.fetchOne(
                db,
                sql: "SELECT EXISTS (SELECT 1 FROM usage WHERE appId = ? AND openedAt > ? AND openedAt < ?)",
                arguments: [
                    id.rawValue, date.addingTimeInterval(-Self.openCoalescing),
                    date.addingTimeInterval(Self.openCoalescing),
                ])
            guard near != true else { return false }
            let row = UsageRow(id: nil, appId: id.rawValue, openedAt: date)
            try row.insert(db)
            return true
        }
    }

    /// Opens of one app closer together than this (seconds, either way) count once.
    public static let openCoalescing: TimeInterval = 60

    /// Forgets every recorded open of the app (`bgctl usage --reset`). Returns how many.
    @discardableResult
    public func forgetOpens(of id: AppID) async throws -> Int {
        try await writer.write { db in
            guard try AppRow.exists(db, key: id.rawValue) else { throw StoreError.appNotFound(id) }
            try db.execute(sql: "DELETE FROM usage WHERE appId = ?", arguments: [id.rawValue])
            return db.changesCount
        }
    }

    /// When the app was opened, oldest first.
    public func opens(of id: AppID, limit: Int = 1000) async throws -> [Date] {
        try await writer.read { db in
            try Date.fetchAll(
                db,
                sql:
                    "SELECT openedAt FROM (SELECT openedAt FROM usage WHERE appId = ? ORDER BY openedAt DESC LIMIT ?) ORDER BY openedAt",
                arguments: [id.rawValue, limit])
        }
    }

    /// Every app's opens since `date` (up to `until`), in time order: what the usage learner is
    /// rebuilt from.
    public func allOpens(since date: Date, until end: Date? = nil) async throws -> [(app: AppID, at: Date)] {
        try await writer.read { db in
            // No upper bound unless asked: a damaged date is then the read's error, not filtered out.
            try Row.fetchAll(
                db,
                sql: "SELECT appId, openedAt FROM usage WHERE openedAt >= ?\(end == nil ? "" : " AND openedAt <= ?")"
                    + " ORDER BY openedAt, id",
                arguments: StatementArguments([date] + (end.map { [$0] } ?? []))
            )
            .compactMap { row in
                let at: Date = try row.decode(forColumn: "openedAt")
                return AppID(rawValue: row["appId"]).map { (app: $0, at: at) }
            }
        }
    }
}
