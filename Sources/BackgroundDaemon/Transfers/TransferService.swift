import AsyncHTTPClient
import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Crypto
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import ServiceLifecycle

/// Carries background transfers: streams each to a partial file in the app's container,
/// checkpoints durably, resumes by the rules of `ResumeDecision`, retries with backoff, waits for
/// the conditions a task asks for, and hands the result over through the app's outbox.
///
/// The store is the truth: every attempt, checkpoint and ending is committed before it counts,
/// so a `kill -9` at any moment loses at most the bytes since the last checkpoint.
public actor TransferService: Service {
    public struct Configuration: Sendable {
        /// Transfers moving bytes at once.
        public var maximumConcurrent: Int
        /// Bytes between durable checkpoints (fsync of the data, then the commit of the offset):
        /// the most a crash can make bgd fetch again.
        public var checkpointInterval: Int64
        public var backoff: RetryBackoff
        /// A transfer that moves no byte for this long fails with `noProgress` (BITS's default is 14 days).
        public var noProgressTimeout: Duration
        /// An attempt whose connection stays silent this long is dropped and retried.
        public var readTimeout: Duration
        public var connectTimeout: Duration
        /// Certificates to trust for HTTPS besides the system's (tests' own CA).
        public var additionalTrustRoots: [String]

        public init(
            maximumConcurrent: Int = 6, checkpointInterval: Int64 = 8 << 20, backoff: RetryBackoff = RetryBackoff(),
            noProgressTimeout: Duration = .seconds(86400), readTimeout: Duration = .seconds(30), connectTimeout: Duration = .seconds(10),
            additionalTrustRoots: [String] = []
        ) {
            self.maximumConcurrent = max(1, maximumConcurrent)
            self.checkpointInterval = max(64 << 10, checkpointInterval)
            self.backoff = backoff
            self.noProgressTimeout = noProgressTimeout
            self.readTimeout = readTimeout
            self.connectTimeout = connectTimeout
            self.additionalTrustRoots = additionalTrustRoots
        }
    }

    private let store: BackgroundStore
    private let stateDirectory: StateDirectory
    private let coordinator: RunCoordinator
    private let broker: EventBroker
    private let conditions: ConditionsMonitor
    private let activity: ActivityFeed
    private let clock: any WallClock
    private let configuration: Configuration
    private let logger: Logger
    private let doorbell: Doorbell
    private let http: HTTPClient
    /// Attempts in flight, so a cancel can stop one and the loop knows the free slots.
    private var attempts: [TransferID: Task<Void, Never>] = [:]
    /// Bytes received by running attempts, checkpointed or not: progress, not a promise.
    private var received: [TransferID: Int64] = [:]

    /// The record with its live progress.
    func live(_ record: TransferRecord) -> TransferRecord {
        var record = record
        record.bytesReceived = received[record.id]
        return record
    }

    init(
        store: BackgroundStore, stateDirectory: StateDirectory, coordinator: RunCoordinator, broker: EventBroker,
        conditions: ConditionsMonitor, activity: ActivityFeed, clock: any WallClock, configuration: Configuration, doorbell: Doorbell,
        logger: Logger
    ) {
        self.doorbell = doorbell
        self.store = store
        self.stateDirectory = stateDirectory
        self.coordinator = coordinator
        self.broker = broker
        self.conditions = conditions
        self.activity = activity
        self.clock = clock
        self.configuration = configuration
        self.logger = logger
        var client = HTTPClient.Configuration(
            redirectConfiguration: .follow(max: 5, allowCycles: false),
            timeout: .init(
                connect: .nanoseconds(Int64(configuration.connectTimeout.seconds * 1e9)),
                read: .nanoseconds(Int64(configuration.readTimeout.seconds * 1e9))),
            decompression: .disabled)
        client.httpVersion = .automatic
        if !configuration.additionalTrustRoots.isEmpty {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.additionalTrustRoots = configuration.additionalTrustRoots.map { .file($0) }
            client.tlsConfiguration = tls
        }
        http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: client)
    }

    // MARK: Service

    public func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                while !Task.isCancelled {
                    let next = try await self.plan()
                    try await self.doorbell.wait(until: next, on: self.clock)
                }
            }
        } catch {}
        for task in attempts.values { task.cancel() }
        for task in attempts.values { await task.value }
        try? await http.shutdown()
    }

    /// Something changed (a new transfer, conditions, a cancel): plan again.
    nonisolated func replan() { doorbell.ring() }

    // MARK: Requests from the API

    /// Takes a transfer over. Uploads are copied now, so the app may delete its file.
    func submit(_ request: TransferRequest, from app: AppID?) async throws -> TransferRecord {
        let directory = try transferDirectory(for: app)
        let name = Self.safeName(for: request.url)
        let stored = try await store.createTransfer(request, app: app, now: clock.now) { id in
            let partial = directory + "/\(id).partial"
            if request.kind == .upload { return (directory + "/\(id).upload", nil) }
            return (partial, request.destination ?? directory + "/\(id)-\(name)")
        }
        if request.kind == .upload, let source = request.uploadFile {
            do {
                try? FileManager.default.removeItem(atPath: stored.partialPath)
                try FileManager.default.copyItem(atPath: source, toPath: stored.partialPath)
            } catch {
                _ = try await store.finishTransfer(
                    stored.record.id, .failed(TransferError(.fileError, "cannot read \(source): \(error.localizedDescription)"), statusCode: nil),
                    now: clock.now)
                throw APIError(.badRequest, "uploadFileUnreadable", "bgd cannot read \(source); give a file bgd's user can read")
            }
        }
        replan()
        return try await store.transfer(stored.record.id)?.record ?? stored.record
    }

    /// Cancels: the attempt stops, the partial file goes, the app hears `cancelled` once.
    func cancel(_ id: TransferID) async throws -> TransferRecord? {
        attempts[id]?.cancel()
        await attempts[id]?.value
        guard let stored = try await store.transfer(id) else { return nil }
        if let ended = try await store.finishTransfer(id, .cancelled, now: clock.now) {
            try? FileManager.default.removeItem(atPath: stored.partialPath)
            await announce(ended)
            return ended
        }
        return stored.record
    }

    /// `cancel(byProducingResumeData:)`: stops and keeps the checkpoint.
    func pause(_ id: TransferID) async throws -> TransferResumeData? {
        attempts[id]?.cancel()
        await attempts[id]?.value
        guard let paused = try await store.pauseTransfer(id) else { return nil }
        return TransferResumeData(transfer: id, bytesTransferred: paused.checkpoint.offset)
    }

    func resume(_ id: TransferID) async throws -> TransferRecord? {
        let resumed = try await store.resumeTransfer(id)
        replan()
        return resumed?.record
    }

    // MARK: Planning

    /// Starts what may start; returns when to look again.
    private func plan() async throws -> Date? {
        let now = clock.now
        let conditions = await self.conditions.effective
        var next: Date?
        func wake(at date: Date) { next = min(next ?? date, date) }
        for transfer in try await store.activeTransfers() where attempts[transfer.record.id] == nil {
            let id = transfer.record.id
            let deadline = transfer.record.createdAt.adding(transfer.request.timeoutForResource)
            if now >= deadline {
                await fail(transfer, TransferError(.timedOut, "not finished within \(transfer.request.timeoutForResource.humanDescription)"))
                continue
            }
            let stalled = transfer.lastProgressAt.adding(configuration.noProgressTimeout)
            if now >= stalled, transfer.record.attempts > 0 {
                await fail(
                    transfer,
                    TransferError(.noProgress, "no progress for \(configuration.noProgressTimeout.humanDescription): \(transfer.record.lastError ?? "no answer")"))
                continue
            }
            wake(at: min(deadline, stalled))
            if let at = transfer.record.nextAttemptAt, at > now {
                wake(at: at)
                continue
            }
            if let reason = Self.conditionsHold(transfer.request, conditions) {
                try await store.setWaiting(id, reason: reason)
                continue
            }
            guard attempts.count < configuration.maximumConcurrent else {
                try await store.setWaiting(id, reason: "waiting for one of \(configuration.maximumConcurrent) transfers to finish")
                continue
            }
            attempts[id] = Task { await self.attempt(id) }
        }
        return next
    }

    /// Why conditions hold this transfer back, or nil. The same conditions the scheduler uses.
    static func conditionsHold(_ request: TransferRequest, _ conditions: DeviceConditions) -> String? {
        if conditions.network == .none { return "waiting for a network" }
        if conditions.network == .metered && (!request.allowsExpensiveNetworkAccess || request.isDiscretionary) {
            return "waiting for an unmetered network"
        }
        if request.isDiscretionary && conditions.power == .battery { return "discretionary: waiting for mains power" }
        return nil
    }

    // MARK: One attempt

    private func attempt(_ id: TransferID) async {
        defer {
            attempts[id] = nil
            received[id] = nil
            replan()
        }
        do {
            guard let transfer = try await store.startAttempt(id) else { return }
            activity.emit(.transferAttemptStarted(id))
            switch transfer.request.kind {
            case .download: try await download(transfer)
            case .upload: try await upload(transfer)
            }
        } catch is CancellationError {
            return  // cancelled or paused: whoever cancelled records it
        } catch {
            logger.error("Transfer attempt failed unexpectedly", metadata: ["transfer.id": "\(id)", "error": "\(error)"])
            if let transfer = try? await store.transfer(id) { await retry(transfer, reason: "\(error)", retryAfter: nil) }
        }
    }

    private func download(_ transfer: StoredTransfer) async throws {
        var checkpoint = transfer.checkpoint
        let destination = transfer.record.destination ?? transfer.partialPath + ".done"
        // Crashed between the rename and its commit: the file is in place, finish the record.
        if PartialFile.size(of: transfer.partialPath) == nil, let total = checkpoint.total, checkpoint.offset == total,
            PartialFile.size(of: destination) == total
        {
            return try await complete(transfer, file: destination, statusCode: transfer.record.statusCode ?? 200)
        }
        // The partial file lost bytes the checkpoint promised (truncated, deleted): start over.
        if checkpoint.offset > 0, (PartialFile.size(of: transfer.partialPath) ?? 0) < checkpoint.offset {
            try await store.discardCheckpoint(transfer.record.id, reason: "the partial file is shorter than the checkpoint")
            checkpoint = .empty
        }
        var request = HTTPClientRequest(url: transfer.request.url.absoluteString)
        request.method = .GET
        for (name, value) in checkpoint.requestHeaders { request.headers.add(name: name, value: value) }
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: .hours(24 * 7))
        } catch {
            return try await attemptFailed(transfer, error)
        }
        let head = ResponseHead(
            status: Int(response.status.code), contentRange: response.headers.first(name: "Content-Range"),
            contentLength: response.headers.first(name: "Content-Length").flatMap(Int64.init),
            entityTag: response.headers.first(name: "ETag"), lastModified: response.headers.first(name: "Last-Modified"),
            date: response.headers.first(name: "Date"), contentEncoding: response.headers.first(name: "Content-Encoding"),
            retryAfter: response.headers.first(name: "Retry-After"))
        switch ResumeDecision.decide(head, checkpoint: checkpoint) {
        case .write(let from, let next, let restarted):
            try await store.saveCheckpoint(transfer.record.id, next, restarted: restarted, now: clock.now)
            try await receive(transfer, body: response.body, from: from, checkpoint: next, head: head, destination: destination)
        case .alreadyComplete:
            try await drain(response.body)
            try await finishDownload(transfer, destination: destination, statusCode: 200)
        case .discardAndRestart(let reason):
            try await drain(response.body)
            try await store.discardCheckpoint(transfer.record.id, reason: reason)
            await retry(transfer, reason: reason, retryAfter: nil)
        case .retry(let reason, let retryAfter):
            try await drain(response.body)
            await retry(transfer, reason: reason, retryAfter: retryAfter)
        case .fail(let error):
            try await drain(response.body)
            try? FileManager.default.removeItem(atPath: transfer.partialPath)
            await fail(transfer, error, statusCode: head.status)
        }
    }

    /// Streams the body into the partial file, syncing and committing a checkpoint every
    /// `checkpointInterval` bytes; a body that ends early is retried from the last checkpoint.
    /// Not isolated to the actor: concurrent transfers write in parallel, not in turn.
    nonisolated private func receive(
        _ transfer: StoredTransfer, body: HTTPClientResponse.Body, from offset: Int64, checkpoint: DownloadCheckpoint,
        head: ResponseHead, destination: String
    ) async throws {
        let id = transfer.record.id
        var file = try PartialFile(path: transfer.partialPath, offset: offset)
        var saved = checkpoint
        var lastProgress = offset
        do {
            for try await buffer in body {
                try Task.checkCancellation()
                try file.write(buffer)
                if file.offset - saved.offset >= configuration.checkpointInterval {
                    try file.sync()
                    saved.offset = file.offset
                    try await store.saveCheckpoint(id, saved, restarted: false, now: clock.now)
                    activity.emit(.transferCheckpointed(id, bytes: saved.offset))
                }
                if file.offset - lastProgress >= 256 << 10 {
                    lastProgress = file.offset
                    await noteReceived(id, bytes: file.offset)
                    if let app = transfer.record.app {
                        broker.send(
                            .transferProgress(transfer: id, session: transfer.record.session, bytesTransferred: file.offset, bytesExpected: saved.total),
                            to: app)
                    }
                }
            }
        } catch is CancellationError {
            try? file.sync()
            throw CancellationError()
        } catch {
            // Keep what is synced; bytes after the checkpoint are cut off on the next attempt.
            if (try? file.sync()) != nil {
                saved.offset = file.offset
                try await store.saveCheckpoint(id, saved, restarted: false, now: clock.now)
            }
            return try await attemptFailed(transfer, error)
        }
        try file.sync()
        saved.offset = file.offset
        if saved.total == nil { saved.total = file.offset }  // no Content-Length: the end of the body is the end
        try await store.saveCheckpoint(id, saved, restarted: false, now: clock.now)
        guard saved.offset == saved.total else {
            return await retry(transfer, reason: "the body ended at \(saved.offset) of \(saved.total ?? 0) bytes", retryAfter: nil)
        }
        var finished = transfer
        finished.checkpoint = saved
        try await finishDownload(finished, destination: destination, statusCode: head.status)
    }

    private func noteReceived(_ id: TransferID, bytes: Int64) { received[id] = bytes }

    /// Verifies the body against the app's hash, moves it into place, records the end.
    private func finishDownload(_ transfer: StoredTransfer, destination: String, statusCode: Int) async throws {
        if let expected = transfer.request.sha256?.lowercased() {
            let actual = try Self.sha256(ofFile: transfer.partialPath)
            guard actual == expected else {
                try? FileManager.default.removeItem(atPath: transfer.partialPath)
                return await fail(transfer, TransferError(.checksumMismatch, "SHA-256 is \(actual), not \(expected)"), statusCode: statusCode)
            }
        }
        guard rename(transfer.partialPath, destination) == 0 else {
            let reason = String(cString: strerror(errno))
            return await fail(transfer, TransferError(.fileError, "cannot move the download to \(destination): \(reason)"), statusCode: statusCode)
        }
        PartialFile.syncDirectory(of: destination)
        try await complete(transfer, file: destination, statusCode: statusCode)
    }

    private func complete(_ transfer: StoredTransfer, file: String, statusCode: Int?) async throws {
        let location = transfer.record.app == nil ? nil : file
        if let ended = try await store.finishTransfer(transfer.record.id, .completed(location: location ?? file, statusCode: statusCode), now: clock.now) {
            logger.info("Transfer completed", metadata: ["transfer.id": "\(transfer.record.id)", "file": "\(file)"])
            await announce(ended)
        }
    }

    private func upload(_ transfer: StoredTransfer) async throws {
        guard let size = PartialFile.size(of: transfer.partialPath) else {
            return await fail(transfer, TransferError(.fileError, "bgd's copy of the upload is gone"))
        }
        var request = HTTPClientRequest(url: transfer.request.url.absoluteString)
        request.method = transfer.request.httpMethod == "PUT" ? .PUT : .POST
        // Every attempt sends the whole file again; the key lets the server drop duplicates.
        request.headers.add(name: "Idempotency-Key", value: "bgd-\(transfer.record.id)-\(Int(transfer.record.createdAt.timeIntervalSince1970))")
        request.headers.add(name: "Content-Type", value: "application/octet-stream")
        request.body = .stream(FileChunks(path: transfer.partialPath), length: .known(size))
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: .hours(24 * 7))
            try await drain(response.body)
        } catch {
            return try await attemptFailed(transfer, error)
        }
        let status = Int(response.status.code)
        switch status {
        case 200..<300:
            try await store.saveCheckpoint(transfer.record.id, DownloadCheckpoint(offset: size, total: size), restarted: false, now: clock.now)
            try? FileManager.default.removeItem(atPath: transfer.partialPath)
            if let ended = try await store.finishTransfer(transfer.record.id, .completed(location: nil, statusCode: status), now: clock.now) {
                await announce(ended)
            }
        case 408, 429, 500...599:
            await retry(transfer, reason: "HTTP \(status)", retryAfter: response.headers.first(name: "Retry-After"))
        default:
            try? FileManager.default.removeItem(atPath: transfer.partialPath)
            await fail(transfer, TransferError(.httpError, "HTTP \(status)"), statusCode: status)
        }
    }

    // MARK: Endings

    /// A network-level failure: TLS and redirect loops are final, the rest is retried.
    private func attemptFailed(_ transfer: StoredTransfer, _ error: any Error) async throws {
        if error is CancellationError { throw error }
        let description = "\(error)"
        if let client = error as? HTTPClientError, client == .redirectLimitReached || client == .redirectCycleDetected {
            return await fail(transfer, TransferError(.tooManyRedirects, "more than 5 redirects"))
        }
        if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError {
            return await fail(transfer, TransferError(.tls, description))
        }
        await retry(transfer, reason: description, retryAfter: nil)
    }

    private func retry(_ transfer: StoredTransfer, reason: String, retryAfter: String?) async {
        let now = clock.now
        let failures = transfer.consecutiveFailures + 1
        // Whole seconds: the store keeps milliseconds, and a retry time read back later than the
        // one planned would wait for a clock tick that never comes.
        let jittered = configuration.backoff.delay(afterFailures: failures, retryAfter: retryAfter, jitter: Double.random(in: 0..<1), now: now)
        let delay = Duration.seconds(jittered.seconds.rounded(.up))
        do {
            try await store.scheduleRetry(transfer.record.id, error: reason, at: now.adding(delay))
            activity.emit(.transferRetryScheduled(transfer.record.id, at: now.adding(delay), reason: reason))
            logger.info("Transfer will retry", metadata: ["transfer.id": "\(transfer.record.id)", "reason": "\(reason)", "in": "\(delay.humanDescription)"])
        } catch {
            logger.error("Cannot record a retry", metadata: ["transfer.id": "\(transfer.record.id)", "error": "\(error)"])
        }
    }

    private func fail(_ transfer: StoredTransfer, _ error: TransferError, statusCode: Int? = nil) async {
        do {
            if let ended = try await store.finishTransfer(transfer.record.id, .failed(error, statusCode: statusCode), now: clock.now) {
                logger.info("Transfer failed", metadata: ["transfer.id": "\(transfer.record.id)", "error": "\(error)"])
                await announce(ended)
            }
        } catch {
            logger.error("Cannot record a failed transfer", metadata: ["transfer.id": "\(transfer.record.id)", "error": "\(error)"])
        }
    }

    /// The ending is committed with its events: now tell (or launch) the app.
    private func announce(_ ended: TransferRecord) async {
        activity.emit(.transferEnded(ended))
        if let app = ended.app { await coordinator.deliverEvents(to: app, reason: .urlSession) }
    }

    // MARK: Helpers

    private func transferDirectory(for app: AppID?) throws -> String {
        let directory = (app.map { try? stateDirectory.container(for: $0) } ?? nil).map { $0 + "/transfers" } ?? stateDirectory.path + "/transfers"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        return directory
    }

    /// A file name from the URL's last path component that cannot leave the directory: no
    /// separators, no dot-only names, printable ASCII only, at most 100 bytes. The server's
    /// `Content-Disposition` is never used.
    public static func safeName(for url: URL) -> String {
        let raw = url.lastPathComponent.removingPercentEncoding ?? url.lastPathComponent
        let allowed = raw.unicodeScalars.map { scalar -> Character in
            let c = Character(scalar)
            return scalar.isASCII && (c.isLetter || c.isNumber || "._-".contains(c)) ? c : "_"
        }
        var name = String(allowed.prefix(100))
        while name.hasPrefix(".") { name.removeFirst() }
        return name.isEmpty ? "download" : name
    }

    static func sha256(ofFile path: String) throws -> String {
        guard let handle = FileHandle(forReadingAtPath: path) else { throw TransferError(.fileError, "cannot read \(path)") }
        defer { try? handle.close() }
        var hasher = SHA256()
        while let chunk = try handle.read(upToCount: 1 << 20), !chunk.isEmpty { hasher.update(data: chunk) }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }

    private func drain(_ body: HTTPClientResponse.Body) async throws {
        var seen = 0
        for try await buffer in body {
            seen += buffer.readableBytes
            if seen > 1 << 20 { break }  // a non-2xx body is never written; nor read forever
        }
    }
}

/// A file as a stream of 256 KiB buffers, for upload bodies.
struct FileChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let path: String

    struct AsyncIterator: AsyncIteratorProtocol {
        let handle: FileHandle?
        mutating func next() async throws -> ByteBuffer? {
            guard let handle, let data = try handle.read(upToCount: 256 << 10), !data.isEmpty else {
                try? handle?.close()
                return nil
            }
            return ByteBuffer(bytes: data)
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(handle: FileHandle(forReadingAtPath: path)) }
}
