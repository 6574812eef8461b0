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
        var waiters: [TransferID: CheckedContinuation<Outcome, Never>] = [:]
        var finishedFiles: [TransferID: URL] = [:]
        /// Ends that came before their caller waited for them, kept while a call is between its
        /// submission and its wait (`awaiting`), and only then: an app that never waits (a
        /// delegate's) kept every end it was told of for as long as it ran.
        var early: [TransferID: Outcome] = [:]
        /// Of those, the ones whose file `events` listeners were told of: theirs too, so not
        /// removed when no caller claims them.
        var toldListeners: Set<TransferID> = []
        var awaiting = 0
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
        let (path, staged) = try await stagedInContainer(file.standardizedFileURL.path)
        defer { if let staged { try? FileManager.default.removeItem(atPath: staged) } }
        return try await submit(
            TransferRequest(
                session: configuration.identifier, kind: .upload, url: url, taskDescription: taskDescription,
                uploadFile: path, httpMethod: httpMethod, isDiscretionary: configuration.isDiscretionary,
                allowsExpensiveNetworkAccess: configuration.allowsExpensiveNetworkAccess,
                timeoutForResource: .seconds(configuration.timeoutIntervalForResource),
                sessionSendsLaunchEvents: configuration.sessionSendsLaunchEvents))
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
    /// `Downloads` directory). Throws the transfer's error when it fails.
    public func download(
        from url: URL, taskDescription: String? = nil, sha256: String? = nil
    ) async throws -> (URL, BackgroundURLSessionTask) {
        beginAwaiting()
        defer { endAwaiting() }
        let task = try await downloadTask(with: url, taskDescription: taskDescription, sha256: sha256)
        let outcome = await wait(for: task.taskIdentifier)
        if let error = outcome.error { throw error }
        guard let file = outcome.file else { throw TransferError(.fileError, "bgd reported success without a file") }
        return (file, task)
    }

    /// Uploads and waits; returns the server's status.
    public func upload(
        fileAt file: URL, to url: URL, httpMethod: String = "POST"
    ) async throws -> (Int?, BackgroundURLSessionTask) {
        beginAwaiting()
        defer { endAwaiting() }
        let task = try await uploadTask(fromFile: file, to: url, httpMethod: httpMethod)
        let outcome = await wait(for: task.taskIdentifier)
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

    private func beginAwaiting() { state.withLock { $0.awaiting += 1 } }

    /// The last call waiting is done: the ends kept meanwhile were none of theirs, nor their
    /// files.
    private func endAwaiting() {
        let unclaimed = state.withLock { state -> [URL] in
            state.awaiting -= 1
            guard state.awaiting == 0 else { return [] }
            defer {
                state.early.removeAll()
                state.toldListeners.removeAll()
            }
            return state.early.filter { !state.toldListeners.contains($0.key) }.values.compactMap(\.file)
        }
        for file in unclaimed { try? FileManager.default.removeItem(at: file) }
    }

    /// How many ends are kept for callers not yet waiting (tests).
    var earlyCount: Int { state.withLock { $0.early.count } }

    private func wait(for id: TransferID) async -> Outcome {
        await withCheckedContinuation { continuation in
            let early: Outcome? = state.withLock { state in
                if let outcome = state.early.removeValue(forKey: id) {
                    state.toldListeners.remove(id)
                    return outcome
                }
                state.waiters[id] = continuation
                return nil
            }
            if let early { continuation.resume(returning: early) }
        }
    }

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
            // of calling the delegate: it leaves bgd's hand-off place before the ack. One that has
            // not begun to wait yet (the end came before bgd's answer to the submission) may be
            // this download's: with no delegate to take it, it is kept for that caller.
            let forCaller = state.withLock { $0.waiters[id] != nil || ($0.awaiting > 0 && delegate == nil) }
            if forCaller {
                let kept = keep(file, id: id)
                // Kept for a caller that may not be this download's: listeners told of it own it
                // too, and it is not removed if no caller claims it (before, it was, from under them).
                let told = hasListeners
                state.withLock { state in
                    state.finishedFiles[id] = kept
                    if told && state.waiters[id] == nil { state.toldListeners.insert(id) }
                }
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
                let waiter = state.waiters.removeValue(forKey: id)
                if waiter == nil && state.awaiting > 0 { state.early[id] = outcome }
                return (waiter, outcome)
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
