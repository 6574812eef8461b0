import BackgroundModel
import Foundation

/// `URLSessionTask` for a transfer bgd carries: an identity, the app's label and the last state
/// bgd reported. Tasks outlive the process: `getAllTasks()` finds them again after a relaunch.
public struct BackgroundURLSessionTask: Hashable, Sendable {
    public let taskIdentifier: TransferID
    public let taskDescription: String?
    public let originalURL: URL?
    public let kind: TransferKind
    public var state: TransferState
    public var countOfBytesReceived: Int64
    public var countOfBytesExpectedToReceive: Int64?

    init(record: TransferRecord) {
        taskIdentifier = record.id
        taskDescription = record.taskDescription
        originalURL = record.url
        kind = record.kind
        state = record.state
        countOfBytesReceived = record.bytesTransferred
        countOfBytesExpectedToReceive = record.bytesExpected
    }

    init(id: TransferID, taskDescription: String?, kind: TransferKind) {
        taskIdentifier = id
        self.taskDescription = taskDescription
        originalURL = nil
        self.kind = kind
        state = .running
        countOfBytesReceived = 0
        countOfBytesExpectedToReceive = nil
    }
}

/// `URLSessionDownloadDelegate`'s methods, with their iOS names.
public protocol BackgroundURLSessionDelegate: AnyObject, Sendable {
    /// The download is at `location`, which is removed when this returns: move it first.
    func urlSession(
        _ session: BackgroundURLSession, downloadTask: BackgroundURLSessionTask, didFinishDownloadingTo location: URL)
    /// The task ended; `error` is nil on success.
    func urlSession(
        _ session: BackgroundURLSession, task: BackgroundURLSessionTask, didCompleteWithError error: TransferError?)
    /// Progress, while the app is connected (not durable: a relaunched app sees only the end).
    func urlSession(
        _ session: BackgroundURLSession, downloadTask: BackgroundURLSessionTask, didWriteData bytesWritten: Int64,
        totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64)
    /// Every event bgd held for the session has been given: call the stored completion handler.
    func urlSessionDidFinishEvents(forBackgroundURLSession session: BackgroundURLSession)
}

extension BackgroundURLSessionDelegate {
    public func urlSession(
        _ session: BackgroundURLSession, downloadTask: BackgroundURLSessionTask, didFinishDownloadingTo location: URL
    ) {}
    public func urlSession(
        _ session: BackgroundURLSession, task: BackgroundURLSessionTask, didCompleteWithError error: TransferError?
    ) {}
    public func urlSession(
        _ session: BackgroundURLSession, downloadTask: BackgroundURLSessionTask, didWriteData bytesWritten: Int64,
        totalBytesWritten: Int64, totalBytesExpectedToWrite: Int64
    ) {}
    public func urlSessionDidFinishEvents(forBackgroundURLSession session: BackgroundURLSession) {}
}

/// What the async API sees of a session, in order.
public enum BackgroundURLSessionEvent: Sendable {
    /// A download finished; the file at `location` is the receiver's to keep (moved out of bgd's hands).
    case downloadFinished(BackgroundURLSessionTask, location: URL)
    case completed(BackgroundURLSessionTask, error: TransferError?, statusCode: Int?)
    case progress(BackgroundURLSessionTask, bytesTransferred: Int64, bytesExpected: Int64?)
    case eventsFinished
}
