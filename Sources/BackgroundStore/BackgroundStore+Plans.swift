import BackgroundModel
import BackgroundPolicy
import Foundation
import GRDB

extension BackgroundStore {
    /// Stores the scheduler's latest decisions, so `bgctl why` shows what the scheduler decided
    /// (not a recomputation) and the reasons survive a restart. `candidates` are the snapshot
    /// the decisions came from: each plan records the newest run it knew of.
    public func savePlan(_ decisions: [WakeDecision], from candidates: [FetchCandidate], now: Date) async throws {
        let basis = Dictionary(
            candidates.map { ($0.app, $0.recentRuns.first?.id) }, uniquingKeysWith: { first, _ in first })
        try await writer.write { db in
            for decision in decisions {
                guard try AppRow.exists(db, key: decision.app.rawValue) else { continue }
                try WakePlanRow(
                    appId: decision.app.rawValue, decidedAt: now, dueAt: decision.dueAt,
                    reasons: ColumnJSON.encode(decision.reasons), basedOnRunId: (basis[decision.app] ?? nil)?.rawValue
                ).save(db)
            }
        }
    }

    /// The latest stored decision for an app, and the newest run it took into account.
    public func savedPlan(for id: AppID) async throws -> SavedPlan? {
        try await writer.read { db in
            guard let row = try WakePlanRow.fetchOne(db, key: id.rawValue) else { return nil }
            let reasons = try ColumnJSON.decode([DecisionReason].self, from: row.reasons)
            return SavedPlan(
                decidedAt: row.decidedAt, decision: WakeDecision(app: id, dueAt: row.dueAt, reasons: reasons),
                basedOnRun: row.basedOnRunId.map(RunID.init))
        }
    }
}

/// A decision of the scheduler as stored.
public struct SavedPlan: Hashable, Sendable {
    public var decidedAt: Date
    public var decision: WakeDecision
    /// The newest finished run the decision took into account (nil: none yet).
    public var basedOnRun: RunID?
}

/// An app with its latest plan and its newest run: one line of `GET /v1/apps`.
public struct AppListing: Sendable {
    public var app: StoredApp
    public var plan: SavedPlan?
    public var lastRun: RunRecord?
}

extension BackgroundStore {
    /// How many apps are registered (systemd's status line: the listing decodes every app).
    public func appCount() async throws -> Int {
        try await writer.read { db in try AppRow.fetchCount(db) }
    }

    /// Every app with its plan and newest run, in one read of three statements, whatever the
    /// number of apps (the listing used to cost two reads per app).
    public func appListing() async throws -> [AppListing] {
        try await writer.read { db in
            let apps = try AppRow.order(AppRow.Columns.id).fetchAll(db).map(StoredApp.init(row:))
            var plans: [String: SavedPlan] = [:]
            for row in try WakePlanRow.fetchAll(db) {
                guard let id = AppID(rawValue: row.appId) else { continue }
                plans[row.appId] = SavedPlan(
                    decidedAt: row.decidedAt,
                    decision: WakeDecision(
                        app: id, dueAt: row.dueAt,
                        reasons: try ColumnJSON.decode([DecisionReason].self, from: row.reasons)),
                    basedOnRun: row.basedOnRunId.map(RunID.init))
            }
            var lastRuns: [String: RunRecord] = [:]
            // The newest run of each app: the same order `runs(of:limit:)` gives.
            let newest = try RunRow.fetchAll(
                db,
                // Driven by the apps, one look each: driven by the runs, it visited every run kept.
                sql: """
                    SELECT r.* FROM app AS a JOIN run AS r ON r.id = (
                        SELECT id FROM run WHERE appId = a.id ORDER BY startedAt DESC, id DESC LIMIT 1)
                    """)
            for row in newest { lastRuns[row.appId] = try RunRecord(row: row) }
            return apps.map { AppListing(app: $0, plan: plans[$0.id.rawValue], lastRun: lastRuns[$0.id.rawValue]) }
        }
    }
}
