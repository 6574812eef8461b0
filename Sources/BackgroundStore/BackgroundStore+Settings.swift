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

    private static let wallClockStepsKey = "wallClockSteps"

    /// The wall clock's steps forward bgd has seen, for pruning to keep after a restart
    /// (`WallClockJumps`); empty when none were saved.
    public func wallClockSteps() async throws -> [WallClockStep] {
        try await writer.read { db in
            guard
                let text = try String.fetchOne(
                    db, sql: "SELECT value FROM setting WHERE key = ?", arguments: [Self.wallClockStepsKey])
            else { return [] }
            return try ColumnJSON.decode([WallClockStep].self, from: text)
        }
    }

    public func setWallClockSteps(_ steps: [WallClockStep]) async throws {
        try await writer.write { db in
            try db.execute(
                sql:
                    "INSERT INTO setting(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                arguments: [Self.wallClockStepsKey, ColumnJSON.encode(steps)])
        }
    }
}

/// A step of the wall clock forward as saved: its reading just before the step, and when (by
/// the clock after it) the step was seen — from which a restarted bgd counts how long ago it was.
public struct WallClockStep: Hashable, Codable, Sendable {
    public var before: Date
    public var seenAt: Date

    public init(before: Date, seenAt: Date) {
        self.before = before
        self.seenAt = seenAt
    }
}
