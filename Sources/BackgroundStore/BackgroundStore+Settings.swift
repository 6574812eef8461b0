import BackgroundModel
import Foundation
import GRDB

extension BackgroundStore {
    private static let conditionOverridesKey = "conditionOverrides"

    /// The conditions set by hand with `bgctl env set`; empty when none are.
    public func conditionOverrides() async throws -> ConditionOverrides {
        try await writer.read { db in
            guard
                let text = try String.fetchOne(
                    db, sql: "SELECT value FROM setting WHERE key = ?", arguments: [Self.conditionOverridesKey])
            else { return ConditionOverrides() }
            return try ColumnJSON.decode(ConditionOverrides.self, from: text)
        }
    }

    /// Replaces the overrides (empty ones remove the setting).
    public func setConditionOverrides(_ overrides: ConditionOverrides) async throws {
        try await writer.write { db in
            if overrides.isEmpty {
                try db.execute(sql: "DELETE FROM setting WHERE key = ?", arguments: [Self.conditionOverridesKey])
            } else {
                try db.execute(
                    sql:
                        "INSERT INTO setting(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    arguments: [Self.conditionOverridesKey, ColumnJSON.encode(overrides)])
            }
        }
    }
}
