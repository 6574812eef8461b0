import BackgroundModel
import Foundation
import GRDB

/// Row types: internal to the store, mapped to Model types at its boundary.
struct AppRow: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "app"
    var id: String
    var launchCommand: String
    var fetchInterval: String
    var tokenHash: String
    var lastEventSeq: Int64
    var registeredAt: Date
    /// JSON [String]: the `BGTaskScheduler` identifiers the app declared at registration.
    var taskIdentifiers: String = "[]"

    enum Columns {
        static let id = Column(CodingKeys.id)
        static let tokenHash = Column(CodingKeys.tokenHash)
    }
}

struct RunRow: Codable, FetchableRecord, MutablePersistableRecord {
    static let databaseTableName = "run"
    var id: Int64?
    var appId: String
    var kind: String
    var trigger: String
    var reasons: String
    var startedAt: Date
    var deadline: Date
    var endedAt: Date?
    var outcome: String?
    var launched: Bool
    var pid: Int64?
    var pidStartTicks: Int64?
    var detail: String?
    /// For a run of kind 'task': the `BGTaskScheduler` identifier and kind it carries out.
    var taskIdentifier: String? = nil
    var taskKind: String? = nil
    /// What the run cost (migration `runUsage`).
    var cpuMicroseconds: Int64? = nil
    var memoryPeakBytes: Int64? = nil

    enum Columns {
        static let id = Column(CodingKeys.id)
        static let appId = Column(CodingKeys.appId)
        static let outcome = Column(CodingKeys.outcome)
        static let startedAt = Column(CodingKeys.startedAt)
    }

    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

struct EventRow: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "event"
    var appId: String
    var seq: Int64
    var kind: String
    var body: String
    var runId: Int64?
    var createdAt: Date
    var closedAt: Date?
    var closedBy: String?

    enum Columns {
        static let appId = Column(CodingKeys.appId)
        static let seq = Column(CodingKeys.seq)
        static let runId = Column(CodingKeys.runId)
        static let closedAt = Column(CodingKeys.closedAt)
    }
}

struct WakePlanRow: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "wakePlan"
    var appId: String
    var decidedAt: Date
    var dueAt: Date?
    var reasons: String
    var basedOnRunId: Int64?
}

struct UsageRow: Codable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "usage"
    var id: Int64?
    var appId: String
    var openedAt: Date
}

/// JSON columns go through the wire coding, so the store and the API agree on dates.
enum ColumnJSON {
    static func encode<T: Encodable>(_ value: T) -> String {
        // Encoding our own Codable model types cannot fail.
        String(decoding: try! WireCoding.makeEncoder().encode(value), as: UTF8.self)
    }

    static func decode<T: Decodable>(_ type: T.Type, from text: String) throws -> T {
        try WireCoding.makeDecoder().decode(type, from: Data(text.utf8))
    }
}
