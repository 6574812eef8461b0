import BackgroundModel
import BackgroundPolicy
import Foundation
import GRDB

extension BackgroundStore {
    /// Stores the scheduler's latest decisions, so `bgctl why` shows what the scheduler decided
    /// (not a recomputation) and the reasons survive a restart.
    public func savePlan(_ decisions: [WakeDecision], now: Date) async throws {
        try await writer.write { db in
            for decision in decisions {
                guard try AppRow.exists(db, key: decision.app.rawValue) else { continue }
                try WakePlanRow(
                    appId: decision.app.rawValue, decidedAt: now, dueAt: decision.dueAt,
                    reasons: ColumnJSON.encode(decision.reasons)
                ).save(db)
            }
        }
    }

    /// The latest stored decision for an app.
    public func savedPlan(for id: AppID) async throws -> (decidedAt: Date, decision: WakeDecision)? {
        try await writer.read { db in
            guard let row = try WakePlanRow.fetchOne(db, key: id.rawValue) else { return nil }
            let reasons = try ColumnJSON.decode([DecisionReason].self, from: row.reasons)
            return (row.decidedAt, WakeDecision(app: id, dueAt: row.dueAt, reasons: reasons))
        }
    }
}
