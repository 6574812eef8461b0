import BackgroundModel
import Foundation
import GRDB

struct TransferRow: Codable, FetchableRecord, MutablePersistableRecord {
    static let databaseTableName = "transfer"
    var id: Int64?
    var appId: String?
    var session: String
    var request: String
    var state: String
    var bytesDone: Int64
    /// The most bytes it ever held, whatever restarts since (progress is only beyond them).
    var bytesHighest: Int64
    var bytesTotal: Int64?
    var validator: String?
    var attempts: Int
    var restarts: Int
    var consecutiveFailures: Int
    var nextAttemptAt: Date?
    var waitingReason: String?
    var lastError: String?
    var error: String?
    var statusCode: Int?
    var partialPath: String
    var destination: String?
    var createdAt: Date
    var lastProgressAt: Date
    var finishedAt: Date?

    enum Columns {
        static let id = Column(CodingKeys.id)
        static let appId = Column(CodingKeys.appId)
        static let session = Column(CodingKeys.session)
        static let state = Column(CodingKeys.state)
        static let partialPath = Column(CodingKeys.partialPath)
        static let destination = Column(CodingKeys.destination)
    }

    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}
