import BackgroundModel
import Foundation

/// A registered app as the store keeps it (the token only as a hash).
public struct StoredApp: Hashable, Sendable {
    public var id: AppID
    public var launchCommand: LaunchCommand
    public var fetchInterval: FetchInterval
    public var registeredAt: Date
    /// The `BGTaskScheduler` identifiers it declared (`BGTaskSchedulerPermittedIdentifiers`).
    public var taskIdentifiers: [String]

    init(row: AppRow) throws {
        guard let id = AppID(rawValue: row.id) else { throw StoreCorruption("app id \(row.id)") }
        self.id = id
        self.launchCommand = try ColumnJSON.decode(LaunchCommand.self, from: row.launchCommand)
        self.fetchInterval = try ColumnJSON.decode(FetchInterval.self, from: row.fetchInterval)
        self.registeredAt = row.registeredAt
        self.taskIdentifiers = try ColumnJSON.decode([String].self, from: row.taskIdentifiers)
    }
}

/// A row the store wrote but cannot read back: only a hand-edited file produces it.
struct StoreCorruption: Error, CustomStringConvertible {
    var what: String
    init(_ what: String) { self.what = what }
    var description: String { "unreadable value in the store: \(what)" }
}
