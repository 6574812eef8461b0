import Foundation

/// A transfer as bgd reports it (`URLSessionTask`'s state and counters, plus why it waits).
public struct TransferRecord: Hashable, Codable, Sendable {
    public var id: TransferID
    /// Nil for the operator's own downloads (`bgctl download` without `--app`).
    public var app: AppID?
    public var session: String
    public var kind: TransferKind
    public var url: URL
    public var taskDescription: String?
    public var state: TransferState
    /// Durable progress: bytes safely on disk (downloads) or sent (uploads).
    public var bytesTransferred: Int64
    /// The body's size when the server said it; nil while unknown.
    public var bytesExpected: Int64?
    /// Attempts made so far, and how many times the body had to start again from byte 0.
    public var attempts: Int
    public var restarts: Int
    /// When the next attempt may start, and why it waits (`waiting` only).
    public var nextAttemptAt: Date?
    public var waitingReason: String?
    /// The last transient error, kept for `bgctl transfers`.
    public var lastError: String?
    public var error: TransferError?
    /// The final HTTP status.
    public var statusCode: Int?
    public var createdAt: Date
    public var finishedAt: Date?
    /// Where the finished download is (operator downloads; app downloads are moved by the app).
    public var destination: String?
    public var isDiscretionary: Bool
    /// While an attempt runs: bytes received so far, checkpointed or not (for progress bars).
    public var bytesReceived: Int64?

    public init(
        id: TransferID, app: AppID?, session: String, kind: TransferKind, url: URL, taskDescription: String?,
        state: TransferState,
        bytesTransferred: Int64, bytesExpected: Int64?, attempts: Int, restarts: Int, nextAttemptAt: Date?,
        waitingReason: String?,
        lastError: String?, error: TransferError?, statusCode: Int?, createdAt: Date, finishedAt: Date?,
        destination: String?,
        isDiscretionary: Bool
    ) {
        self.id = id
        self.app = app
        self.session = session
        self.kind = kind
        self.url = url
        self.taskDescription = taskDescription
        self.state = state
        self.bytesTransferred = bytesTransferred
        self.bytesExpected = bytesExpected
        self.attempts = attempts
        self.restarts = restarts
        self.nextAttemptAt = nextAttemptAt
        self.waitingReason = waitingReason
        self.lastError = lastError
        self.error = error
        self.statusCode = statusCode
        self.createdAt = createdAt
        self.finishedAt = finishedAt
        self.destination = destination
        self.isDiscretionary = isDiscretionary
    }
}

extension TransferRecord {
    /// An attempt under way that has moved no byte yet: still connecting, as far as anyone
    /// watching can tell (a transfer that waits for connectivity keeps trying to connect for the
    /// connect timeout, ~10 s). Shown as "connecting", not as "running" at 0 B.
    public var isConnecting: Bool { state == .running && (bytesReceived ?? bytesTransferred) == 0 }

    /// The state as people read it: "connecting" for a running transfer that has moved nothing.
    public var stateDescription: String { isConnecting ? "connecting" : state.rawValue }
}

/// What `cancel(byProducingResumeData:)` gives back, and `download(withResumeData:)` takes.
public struct TransferResumeData: Hashable, Codable, Sendable {
    public var transfer: TransferID
    public var bytesTransferred: Int64

    public init(transfer: TransferID, bytesTransferred: Int64) {
        self.transfer = transfer
        self.bytesTransferred = bytesTransferred
    }
}
