import BackgroundModel
import Foundation
import Synchronization

/// `URLSession` with a background configuration: transfers handed to bgd, which carries them
/// through the app's exit, crashes of either side and bad networks, and gives the events back —
/// to the delegate with the iOS method names, and to `events` for async code.
///
/// ```swift
/// let session = BackgroundURLSession(configuration: .background(withIdentifier: "downloads"),
///                                    delegate: self, application: app)
/// let task = try await session.downloadTask(with: url)          // bgd has it now; the app may exit
/// ```
public final class BackgroundURLSession: Sendable {
    public let configuration: BackgroundURLSessionConfiguration
    public let delegate: (any BackgroundURLSessionDelegate)?
    let application: BackgroundApplication

    private struct State {
        /// The `download(from:)` and `upload` callers waiting for their transfer's end.
        var waiters: [TransferID: CheckedContinuation<Outcome, Never>] = [:]
        var finishedFiles: [TransferID: URL] = [:]
        /// Callers between their submission and their wait: until they wait, the transfer they
        /// submitted has no known id, so the session's events wait for them (`submissionsSettled`).
        var submitting = 0
        var settledWaiters: [CheckedContinuation<Void, Never>] = []
        var listeners: [UUID: AsyncStream<BackgroundURLSessionEvent>.Continuation] = [:]
    }

    struct Outcome: Sendable {
        var file: URL?
        var error: TransferError?
        var statusCode: Int?
    }

    private let state = Mutex(State())

    public init(
        configuration: BackgroundURLSessionConfiguration, delegate: (any BackgroundURLSessionDelegate)? = nil,
        application: BackgroundApplication
    ) {
        self.configuration = configuration
        self.delegate = delegate
        self.application = application
        application.sessions.register(self)
    }

    // MARK: Handing transfers over

    /// `downloadTask(with:)` + `resume()`: bgd owns the download once this returns.
    public func downloadTask(
        with url: URL, taskDescription: String? = nil, sha256: String? = nil, earliestBeginDate: Date? = nil
    ) async throws -> BackgroundURLSessionTask {
        try await submit(
            TransferRequest(
                session: configuration.identifier, kind: .download, url: url, taskDescription: taskDescription,
                isDiscretionary: configuration.isDiscretionary,
                allowsExpensiveNetworkAccess: configuration.allowsExpensiveNetworkAccess,
                timeoutForResource: .seconds(configuration.timeoutIntervalForResource),
                earliestBegin: earliestBeginDate, sha256: sha256,
                sessionSendsLaunchEvents: configuration.sessionSendsLaunchEvents))
    }

    /// `uploadTask(with:fromFile:)`: bgd copies the file at once, so the app may delete it.
    ///
    /// bgd reads only files inside the app's container (it never reads a path an app names
    /// elsewhere, docs/security.md); a file the app has elsewhere is staged into the container
    /// first — by the app, with its own rights — and removed once bgd has its copy.
    public func uploadTask(
        fromFile file: URL, to url: URL, httpMethod: String = "POST", taskDescription: String? = nil
    ) async throws -> BackgroundURLSessionTask {
        try await withFileInContainer(file) { path in
            try await submit(uploadRequest(path, to: url, httpMethod: httpMethod, taskDescription: taskDescription))
        }
    }

    /// Runs `body` with the path bgd should read `file` from (`stagedInContainer`), and removes
    /// the staged copy after.
    private func withFileInContainer<T>(_ file: URL, _ body: (String) async throws -> T) async throws -> T {
        let (path, staged) = try await stagedInContainer(file.standardizedFileURL.path)
        defer { if let staged { try? FileManager.default.removeItem(atPath: staged) } }
        return try await body(path)
    }

    /// The request to upload the file at `path` (in the container).
    private func uploadRequest(
        _ path: String, to url: URL, httpMethod: String, taskDescription: String?
    ) -> TransferRequest {
        TransferRequest(
            session: configuration.identifier, kind: .upload, url: url, taskDescription: taskDescription,
            uploadFile: path, httpMethod: httpMethod, isDiscretionary: configuration.isDiscretionary,
            allowsExpensiveNetworkAccess: configuration.allowsExpensiveNetworkAccess,
            timeoutForResource: .seconds(configuration.timeoutIntervalForResource),
            sessionSendsLaunchEvents: configuration.sessionSendsLaunchEvents)
    }

    /// The path bgd should read `path` from: itself when it is in the container, else a copy
    /// made there (returned second, for removal).
    private func stagedInContainer(_ path: String) async throws -> (path: String, staged: String?) {
        let known = application.containerPath
        guard let container = known != nil ? known : try await application.summary().containerPath else {
            return (path, nil)
        }
        if path.hasPrefix(container + "/") { return (path, nil) }
        let uploads = container + "/.uploads"
        try FileManager.default.createDirectory(
            atPath: uploads, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        let staged = uploads + "/" + UUID().uuidString + "-" + (path as NSString).lastPathComponent
        try FileManager.default.copyItem(atPath: path, toPath: staged)
        return (staged, staged)
    }

    /// Downloads and waits: the file returned is the caller's (moved into the app's
    /// `Downloads` directory). Throws the transfer's error when it fails; cancelling the caller
    /// cancels the download.
    public func download(
        from url: URL, taskDescription: String? = nil, sha256: String? = nil
    ) async throws -> (URL, BackgroundURLSessionTask) {
        let (task, outcome) = try await submitAndWait {
            try await downloadTask(with: url, taskDescription: taskDescription, sha256: sha256)
        }
        if let error = outcome.error { throw error }
        guard let file = outcome.file else { throw TransferError(.fileError, "bgd reported success without a file") }
        return (file, task)
    }

    /// Uploads and waits; returns the server's status. Cancelling the caller cancels the upload.
    public func upload(
        fileAt file: URL, to url: URL, httpMethod: String = "POST"
    ) async throws -> (Int?, BackgroundURLSessionTask) {
        // Staged before the submission, not during it: the session's events wait only for the
        // request itself, not for a copy of a large file.
        let (task, outcome) = try await withFileInContainer(file) { path in
            try await submitAndWait {
                try await submit(uploadRequest(path, to: url, httpMethod: httpMethod, taskDescription: nil))
            }
        }
        if let error = outcome.error { throw error }
        return (outcome.statusCode, task)
    }

    /// The session's transfers that have not ended.
    public func getAllTasks() async throws -> [BackgroundURLSessionTask] {
        let records = try await application.client.send(
            .get, "/v1/app/transfers?session=\(Self.queryEscaped(configuration.identifier))", as: [TransferRecord].self)
        return records.filter { !$0.state.isFinal }.map(BackgroundURLSessionTask.init(record:))
    }

    public func cancel(_ task: BackgroundURLSessionTask) async throws {
        _ = try await application.client.send(
            .delete, "/v1/app/transfers/\(task.taskIdentifier)", as: TransferRecord.self)
    }

    /// Stops the download and keeps what it has, for `downloadTask(withResumeData:)`.
    public func cancel(
        _ task: BackgroundURLSessionTask, byProducingResumeData: Void = ()
    ) async throws -> TransferResumeData {
        try await application.client.send(
            .post, "/v1/app/transfers/\(task.taskIdentifier)/pause", as: TransferResumeData.self)
    }

    public func downloadTask(withResumeData data: TransferResumeData) async throws -> BackgroundURLSessionTask {
        BackgroundURLSessionTask(
            record: try await application.client.send(
                .post, "/v1/app/transfers/\(data.transfer)/resume", as: TransferRecord.self))
    }

    /// The session's events as they arrive, for async code.
    public var events: AsyncStream<BackgroundURLSessionEvent> {
        let (stream, continuation) = AsyncStream<BackgroundURLSessionEvent>.makeStream()
        let id = UUID()
        state.withLock { $0.listeners[id] = continuation }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.listeners.removeValue(forKey: id) }
        }
        return stream
    }

    private func submit(_ request: TransferRequest) async throws -> BackgroundURLSessionTask {
        BackgroundURLSessionTask(
            record: try await application.client.send(
                .post, "/v1/app/transfers", body: request, as: TransferRecord.self))
    }

    /// Submits a transfer for a caller who waits for its end, and waits. The session's events
    /// wait while the submission is under way (`submissionsSettled`): a transfer can end before
    /// bgd's answer says its id, and its file went to the delegate, the caller left with
    /// "success without a file". (Before, ends that came early were kept for callers not yet
    /// waiting, guessed at: with a delegate, never.) A caller cancelled stops waiting at once,
    /// as iOS's async methods throw, and bgd is asked to cancel the transfer.
    func submitAndWait(
        _ submit: () async throws -> BackgroundURLSessionTask
    ) async throws -> (BackgroundURLSessionTask, Outcome) {
        state.withLock { $0.submitting += 1 }
        let task: BackgroundURLSessionTask
        do {
            task = try await submit()
        } catch {
            settleSubmission(waiting: nil)
            throw error
        }
        let id = task.taskIdentifier
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in settleSubmission(waiting: (id, continuation)) }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume(returning: Self.cancelledByCaller)
            Task { try? await self.cancel(task) }
        }
        return (task, outcome)
    }

    private static let cancelledByCaller = Outcome(
        file: nil, error: TransferError(.cancelled, "the caller was cancelled"), statusCode: nil)

    /// One submission is over: its caller waits now (or it failed), and the events held for it
    /// go on once none is under way. A caller already cancelled is not made to wait (checked
    /// under the lock the cancellation handler takes: one or the other resumes it, never both).
    private func settleSubmission(waiting: (TransferID, CheckedContinuation<Outcome, Never>)?) {
        let (settled, cancelled) = state.withLock { state -> ([CheckedContinuation<Void, Never>], Bool) in
            let cancelled = waiting != nil && Task.isCancelled
            if let (id, continuation) = waiting, !cancelled { state.waiters[id] = continuation }
            state.submitting -= 1
            guard state.submitting == 0 else { return ([], cancelled) }
            defer { state.settledWaiters.removeAll() }
            return (state.settledWaiters, cancelled)
        }
        for waiter in settled { waiter.resume() }
        if cancelled { waiting?.1.resume(returning: Self.cancelledByCaller) }
    }

    /// Whether a caller is between its submission and its wait: the session's events then go
    /// through its own queue, off the stream's loop, to wait for it there.
    var hasSubmissionsUnderWay: Bool { state.withLock { $0.submitting > 0 } }

    /// Returns once no caller is between its submission and its wait: an event delivered then
    /// finds the caller whose transfer it is.
    func submissionsSettled() async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state in
                if state.submitting == 0 { return true }
                state.settledWaiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// How many callers' transfers the session holds a file or a wait for (tests).
    var heldForCallers: Int { state.withLock { $0.waiters.count + $0.finishedFiles.count } }

    static func queryEscaped(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? text
    }

    // MARK: Events from bgd, in order

    func deliver(_ body: AppEvent.Body) {
        switch body {
        case .downloadFinished(let id, _, let description, let location):
            let task = BackgroundURLSessionTask(id: id, taskDescription: description, kind: .download)
            let file = URL(fileURLWithPath: location)
            // A `download(from:)` caller owns the file, as iOS's async methods return it instead
            // of calling the delegate: it leaves bgd's hand-off place before the ack. (Every
            // caller waits by now: `submissionsSettled`.)
            if state.withLock({ $0.waiters[id] != nil }) {
                let kept = keep(file, id: id)
                state.withLock { $0.finishedFiles[id] = kept }
                broadcast(.downloadFinished(task, location: kept ?? file))
            } else {
                // The delegate takes it first, as on iOS; what it leaves is for `events`.
                // (Before, a listener's keep moved the file first and the delegate was handed
                // the place it had just left.)
                delegate?.urlSession(self, downloadTask: task, didFinishDownloadingTo: file)
                if hasListeners {
                    let left = FileManager.default.fileExists(atPath: file.path) ? keep(file, id: id) : nil
                    broadcast(.downloadFinished(task, location: left ?? file))
                }
            }
            // As on iOS: whatever nobody took is gone once the event is handled.
            try? FileManager.default.removeItem(at: file)
        case .transferCompleted(let id, _, let description, let statusCode, let error):
            let task = BackgroundURLSessionTask(id: id, taskDescription: description, kind: .download)
            delegate?.urlSession(self, task: task, didCompleteWithError: error)
            broadcast(.completed(task, error: error, statusCode: statusCode))
            let (waiter, outcome) = state.withLock { state -> (CheckedContinuation<Outcome, Never>?, Outcome) in
                let outcome = Outcome(
                    file: state.finishedFiles.removeValue(forKey: id), error: error, statusCode: statusCode)
                return (state.waiters.removeValue(forKey: id), outcome)
            }
            waiter?.resume(returning: outcome)
        case .sessionEventsFinished:
            delegate?.urlSessionDidFinishEvents(forBackgroundURLSession: self)
            broadcast(.eventsFinished)
        case .fetch, .remoteNotification, .backgroundTask:
            break
        }
    }

    func progress(_ id: TransferID, bytes: Int64, expected: Int64?) {
        let task = BackgroundURLSessionTask(id: id, taskDescription: nil, kind: .download)
        delegate?.urlSession(
            self, downloadTask: task, didWriteData: 0, totalBytesWritten: bytes,
            totalBytesExpectedToWrite: expected ?? -1)
        broadcast(.progress(task, bytesTransferred: bytes, bytesExpected: expected))
    }

    private var hasListeners: Bool { state.withLock { !$0.listeners.isEmpty } }

    private func broadcast(_ event: BackgroundURLSessionEvent) {
        for listener in state.withLock({ Array($0.listeners.values) }) { listener.yield(event) }
    }

    /// Moves a finished download to `<container>/Downloads/<id>-<name>`, next to where bgd put it.
    private func keep(_ file: URL, id: TransferID) -> URL? {
        let container = file.deletingLastPathComponent().deletingLastPathComponent()
        let downloads = container.appendingPathComponent("Downloads")
        try? FileManager.default.createDirectory(at: downloads, withIntermediateDirectories: true)
        let target = downloads.appendingPathComponent("\(id)-\(file.lastPathComponent)")
        try? FileManager.default.removeItem(at: target)
        do {
            try FileManager.default.moveItem(at: file, to: target)
            return target
        } catch {
            return nil
        }
    }
}

/// The app's sessions by identifier, so that events reach the session the app (re)created.
final class SessionRegistry: Sendable {
    private struct State {
        var sessions: [String: BackgroundURLSession] = [:]
        var waiters: [String: [UUID: CheckedContinuation<BackgroundURLSession?, Never>]] = [:]
    }
    private let state = Mutex(State())

    func register(_ session: BackgroundURLSession) {
        let waiters = state.withLock { state in
            state.sessions[session.configuration.identifier] = session
            return state.waiters.removeValue(forKey: session.configuration.identifier) ?? [:]
        }
        for waiter in waiters.values { waiter.resume(returning: session) }
    }

    func existing(_ identifier: String) -> BackgroundURLSession? { state.withLock { $0.sessions[identifier] } }

    /// The session, once the app has created it (events wait for it, in order, as on iOS where
    /// the app recreates the session in `handleEventsForBackgroundURLSession`); nil when the
    /// wait is cancelled (the connection ended).
    func session(_ identifier: String) async -> BackgroundURLSession? {
        let waiter = UUID()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // Some(nil): cancelled before the wait began.
                let found: BackgroundURLSession?? = state.withLock { state in
                    if let session = state.sessions[identifier] { return session }
                    if Task.isCancelled { return .some(nil) }
                    state.waiters[identifier, default: [:]][waiter] = continuation
                    return nil
                }
                if let found { continuation.resume(returning: found) }
            }
        } onCancel: {
            state.withLock { $0.waiters[identifier]?.removeValue(forKey: waiter) }?.resume(returning: nil)
        }
    }
}
