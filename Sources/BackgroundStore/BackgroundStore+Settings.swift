import BackgroundModel
import Foundation
import GRDB

extension BackgroundStore {
    private static let conditionOverridesKey = "conditionOverrides"

    /// The conditions set by hand with `bgctl env set`; empty when none are.
    public func conditionOverrides() async throws -> ConditionOverrides {
        try await setting(Self.conditionOverridesKey, as: ConditionOverrides.self) ?? ConditionOverrides()
    }

    /// Replaces the overrides (empty ones remove the setting).
    public func setConditionOverrides(_ overrides: ConditionOverrides) async throws {
        try await setSetting(Self.conditionOverridesKey, to: overrides.isEmpty ? nil : overrides)
    }

    private static let wallClockStepsKey = "wallClockSteps"

    /// The wall clock's steps forward bgd has seen, for pruning to keep after a restart
    /// (`WallClockJumps`); empty when none were saved.
    public func wallClockSteps() async throws -> [WallClockStep] {
        try await setting(Self.wallClockStepsKey, as: [WallClockStep].self) ?? []
    }

    public func setWallClockSteps(_ steps: [WallClockStep]) async throws {
        try await setSetting(Self.wallClockStepsKey, to: steps)
    }

    /// The setting `key` as JSON, nil when it is not set.
    private func setting<Value: Decodable & Sendable>(_ key: String, as type: Value.Type) async throws -> Value? {
        try await writer.read { db in
            try String.fetchOne(db, sql: "SELECT value FROM setting WHERE key = ?", arguments: [key])
                .map { try ColumnJSON.decode(Value.self, from: $0) }
        }
    }

    /// Sets `key` to `value` as JSON, or removes it (nil).
    private func setSetting(_ key: String, to value: (some Encodable & Sendable)?) async throws {
        try await writer.write { db in
            if let value {
                try db.execute(
                    sql:
                        "INSERT INTO setting(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    arguments: [key, ColumnJSON.encode(value)])
            } else {
                try db.execute(sql: "DELETE FROM setting WHERE key = ?", arguments: [key])
            }
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
