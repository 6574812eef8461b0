import BackgroundModel
import Foundation
import GRDB

/// A process bgd stopped (SIGSTOP) and must continue, even after a crash of bgd.
public struct SuspendedProcess: Hashable, Sendable {
    public var app: AppID
    public var processID: Int32
    /// The process's start time (`/proc/<pid>/stat`), so a reused pid is never continued.
    public var startTicks: Int64?
}

extension BackgroundStore {
    /// Recorded before the SIGSTOP is sent.
    public func recordSuspension(of app: AppID, processID: Int32, startTicks: Int64?, now: Date) async throws {
        try await writer.write { db in
            try db.execute(
                sql: "INSERT OR REPLACE INTO suspendedProcess(pid, appId, startTicks, suspendedAt) VALUES (?, ?, ?, ?)",
                arguments: [processID, app.rawValue, startTicks, now])
        }
    }

    /// The process was continued, or is gone.
    public func clearSuspension(processID: Int32) async throws {
        try await writer.write { db in
            try db.execute(sql: "DELETE FROM suspendedProcess WHERE pid = ?", arguments: [processID])
        }
    }

    /// Every process a bgd stopped and did not continue; clears the list.
    public func takeSuspensions() async throws -> [SuspendedProcess] {
        try await writer.write { db in
            let rows = try Row.fetchAll(db, sql: "SELECT * FROM suspendedProcess")
            try db.execute(sql: "DELETE FROM suspendedProcess")
            return rows.compactMap { row in
                AppID(rawValue: row["appId"]).map {
                    SuspendedProcess(
                        app: $0, processID: Int32(truncatingIfNeeded: row["pid"] as Int64),
                        startTicks: row["startTicks"])
                }
            }
        }
    }
}
