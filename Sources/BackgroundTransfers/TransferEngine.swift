import AsyncHTTPClient
import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Makes one attempt at a transfer: the HTTP request, the resume rules of `ResumeDecision`, the
/// body streamed to the partial file with durable checkpoints, the hash check and the move into
/// place. It decides nothing about *whether* or *when* to try (that is the daemon's
/// TransferService); it says how the attempt went.
///
/// Checkpoints are committed here, as they happen: after `fsync` of the bytes, the offset goes to
/// the store, so a crash at any moment loses at most `checkpointInterval` bytes.
public final class TransferEngine: Sendable {
    public struct Configuration: Sendable {
        /// Bytes between durable checkpoints.
        public var checkpointInterval: Int64
        /// An attempt whose connection stays silent this long is dropped (and retried).
        public var readTimeout: Duration
        public var connectTimeout: Duration
        /// Certificates to trust for HTTPS besides the system's (a test's own CA).
        public var additionalTrustRoots: [String]
        /// Bytes a second all downloads together may receive; nil: no cap.
        public var bandwidthLimit: Int64?
        /// The user's umask: the operator's downloads get the mode the user's own new files get
        /// (0644 under 022). bgd passes the one it was started with, before it sets its own
        /// 077; by default, this process's now.
        public var userUmask: mode_t

        public init(
            checkpointInterval: Int64 = 8 << 20, readTimeout: Duration = .seconds(30),
            connectTimeout: Duration = .seconds(10),
            additionalTrustRoots: [String] = [], bandwidthLimit: Int64? = nil, userUmask: mode_t? = nil
        ) {
            self.bandwidthLimit = bandwidthLimit
            self.userUmask = userUmask ?? SafeFiles.currentUmask()
            self.checkpointInterval = max(64 << 10, checkpointInterval)
            self.readTimeout = readTimeout
            self.connectTimeout = connectTimeout
            self.additionalTrustRoots = additionalTrustRoots
        }
    }

    /// How an attempt went.
    public enum Outcome: Sendable, Equatable {
        /// Done: a download's file is at `file` (moved into place); an upload was accepted.
        case completed(file: String?, statusCode: Int?)
        /// Worth another attempt later (the checkpoint is kept, or was dropped if `reason` says so).
        case retry(reason: String, retryAfter: String?)
        /// Final.
        case failed(TransferError, statusCode: Int?)
    }

    /// What an attempt reports while it runs.
    public struct Observer: Sendable {
        /// The body is about to be written from this offset: the checkpoint resumed (bytes a
        /// previous attempt, or a previous bgd, received), or 0 when the server sent it whole.
        public var receiving: @Sendable (TransferID, Int64) -> Void
        /// Bytes up to this offset are synced and committed.
        public var checkpointed: @Sendable (TransferID, Int64) -> Void
        /// Bytes received so far (every 256 KiB), checkpointed or not.
        public var progress: @Sendable (StoredTransfer, Int64, Int64?) async -> Void

        public init(
            receiving: @escaping @Sendable (TransferID, Int64) -> Void = { _, _ in },
            checkpointed: @escaping @Sendable (TransferID, Int64) -> Void = { _, _ in },
            progress: @escaping @Sendable (StoredTransfer, Int64, Int64?) async -> Void = { _, _, _ in }
        ) {
            self.receiving = receiving
            self.checkpointed = checkpointed
            self.progress = progress
        }
    }

    private let store: BackgroundStore
    private let clock: any WallClock
    private let configuration: Configuration
    /// Made at the first attempt (a bgd that never transfers holds no connection pool or TLS
    /// context, and one never run has nothing to shut down), keyed by `waitsForConnectivity`. The fail-fast one's pool does not retry a refused or
    /// unresolvable host until the connect timeout, so a download at a terminal fails in
    /// milliseconds, as curl's does; it is made only when such a transfer comes.
    private let clients = Mutex<[Bool: HTTPClient]>([:])
    private let clientConfiguration: HTTPClient.Configuration
    private let cap: BandwidthCap?

    public init(store: BackgroundStore, clock: any WallClock, configuration: Configuration) {
        cap = configuration.bandwidthLimit.map(BandwidthCap.init(bytesPerSecond:))
        self.store = store
        self.clock = clock
        self.configuration = configuration
        var client = HTTPClient.Configuration(
            redirectConfiguration: .disallow,  // followed by `Redirects`, which checks each Location
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
        clientConfiguration = client
    }

    private func http(for request: TransferRequest) -> HTTPClient {
        var configuration = clientConfiguration
        configuration.connectionPool.retryConnectionEstablishment = request.waitsForConnectivity
        return clients.withLock { clients in
            if let client = clients[request.waitsForConnectivity] { return client }
            let made = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            clients[request.waitsForConnectivity] = made
            return made
        }
    }

    public func shutdown() async {
        let made = clients.withLock { clients in
            defer { clients = [:] }
            return clients.values
        }
        for client in made { try? await client.shutdown() }
    }

    /// One attempt. Throws only `CancellationError` (cancelled or paused: the caller records that)
    /// and store errors.
    public func attempt(_ transfer: StoredTransfer, observer: Observer) async throws -> Outcome {
        // Requests are checked when they come; one stored before a check existed is checked here
        // (a URL NIO cannot take must never reach it).
        if let problem = ServerURL.problem(with: transfer.request.url) {
            return .failed(TransferError(.badURL, "the URL \(problem)"), statusCode: nil)
        }
        return switch transfer.request.kind {
        case .download: try await download(transfer, observer: observer)
        case .upload: try await upload(transfer)
        }
    }

    // MARK: Downloads

    private func download(_ transfer: StoredTransfer, observer: Observer) async throws -> Outcome {
        var checkpoint = transfer.checkpoint
        let destination = transfer.record.destination ?? transfer.partialPath + ".done"
        // Crashed between the move into place and its commit: the file is there; say so once its
        // name is synced (the crash may have come before the sync). (A crash between the link and
        // the unlink of a no-replace move leaves both names on it.)
        if let total = checkpoint.total, checkpoint.offset == total, SafeFiles.size(of: destination) == total,
            SafeFiles.size(of: transfer.partialPath) == nil || SafeFiles.sameFile(transfer.partialPath, destination)
        {
            SafeFiles.remove(transfer.partialPath)
            if let unsynced = Self.syncName(of: destination, partial: transfer.partialPath) { return unsynced }
            return .completed(file: destination, statusCode: transfer.record.statusCode ?? 200)
        }
        // The partial file lost bytes the checkpoint promised (truncated, deleted): start over.
        if checkpoint.offset > 0, (SafeFiles.size(of: transfer.partialPath) ?? 0) < checkpoint.offset {
            try await store.discardCheckpoint(
                transfer.record.id, reason: "the partial file is shorter than the checkpoint")
            checkpoint = .empty
        }
        let resume = checkpoint.requestHeaders
        let response: HTTPClientResponse
        do {
            response = try await send(transfer, method: .GET) { hop in
                var request = HTTPClientRequest(url: hop.url.absoluteString)
                request.method = hop.method
                for (name, value) in resume { request.headers.add(name: name, value: value) }
                return request
            }
        } catch {
            return try Self.outcome(of: error, waitsForConnectivity: transfer.request.waitsForConnectivity)
        }
        let head = ResponseHead(
            status: Int(response.status.code), contentRange: response.headers.first(name: "Content-Range"),
            contentLength: response.headers.first(name: "Content-Length").flatMap(Int64.init),
            entityTag: response.headers.first(name: "ETag"),
            lastModified: response.headers.first(name: "Last-Modified"),
            date: response.headers.first(name: "Date"),
            contentEncoding: response.headers.first(name: "Content-Encoding"),
            retryAfter: response.headers.first(name: "Retry-After"))
        switch ResumeDecision.decide(head, checkpoint: checkpoint) {
        case .write(let from, let next, let restarted):
            try await store.saveCheckpoint(transfer.record.id, next, restarted: restarted, now: clock.now)
            observer.receiving(transfer.record.id, from)
            return try await receive(
                transfer, body: response.body, from: from, checkpoint: next, head: head, destination: destination,
                observer: observer)
        case .alreadyComplete:
            try await drain(response.body)
            return finish(transfer, destination: destination, statusCode: 200)
        case .discardAndRestart(let reason):
            try await drain(response.body)
            try await store.discardCheckpoint(transfer.record.id, reason: reason)
            return .retry(reason: reason, retryAfter: nil)
        case .retry(let reason, let retryAfter):
            try await drain(response.body)
            return .retry(reason: reason, retryAfter: retryAfter)
        case .fail(let error):
            try await drain(response.body)
            SafeFiles.remove(transfer.partialPath)
            return .failed(error, statusCode: head.status)
        }
    }

    /// Streams the body into the partial file, syncing and committing a checkpoint every
    /// `checkpointInterval` bytes; a body that ends early is retried from the last checkpoint.
    private func receive(
        _ transfer: StoredTransfer, body: HTTPClientResponse.Body, from offset: Int64, checkpoint: DownloadCheckpoint,
        head: ResponseHead, destination: String, observer: Observer
    ) async throws -> Outcome {
        let id = transfer.record.id
        var file: PartialFile
        do {
            file = try PartialFile(path: transfer.partialPath, offset: offset)
        } catch let failure as PartialFile.Failure where Self.notAFile.contains(failure.code) {
            // Something else at the download's place: a link, a FIFO or a directory the app put
            // in its container. Never followed nor written through; the transfer fails, said so,
            // rather than fail each attempt until the no-progress timeout (a day).
            try await drain(body)
            _ = SafeFiles.remove(transfer.partialPath)
            return .failed(
                TransferError(.fileError, "not bgd's partial file at the download's place (\(failure))"),
                statusCode: nil)
        } catch {
            // A full disk waits for room, as a write that finds it full does.
            try await drain(body)
            return try Self.outcome(of: error, waitsForConnectivity: transfer.request.waitsForConnectivity)
        }
        var saved = checkpoint
        var lastProgress = offset
        do {
            for try await buffer in body {
                try Task.checkCancellation()
                try await cap?.take(buffer.readableBytes)
                try file.write(buffer)
                if file.offset - saved.offset >= configuration.checkpointInterval {
                    try file.sync()
                    Failpoint.transferAfterCheckpointSync.hit()
                    saved.offset = file.offset
                    try await store.saveCheckpoint(id, saved, restarted: false, now: clock.now)
                    observer.checkpointed(id, saved.offset)
                }
                if file.offset - lastProgress >= 256 << 10 {
                    lastProgress = file.offset
                    await observer.progress(transfer, file.offset, saved.total)
                }
            }
        } catch is CancellationError {
            // Paused, cancelled or bgd stopping: what is written and synced becomes the
            // checkpoint, so a pause (or the next start) carries on from here, not from the last
            // checkpoint up to `checkpointInterval` back. The save runs in a task of its own:
            // this one is cancelled, and the store's call would stop before it began.
            if file.offset > saved.offset, (try? file.sync()) != nil {
                var kept = saved
                kept.offset = file.offset
                let (store, now) = (self.store, clock.now)
                if (try? await Task { try await store.saveCheckpoint(id, kept, restarted: false, now: now) }.value)
                    != nil
                {
                    observer.checkpointed(id, kept.offset)
                }
            }
            throw CancellationError()
        } catch let failure as PartialFile.Failure where failure.operation == "fsync" {
            // Never retry a failed fsync and trust it (fsyncgate): the pages it lost are gone.
            // The next attempt starts from the last checkpoint committed before it.
            return .retry(reason: "\(failure); going back to the last checkpoint", retryAfter: nil)
        } catch {
            // Keep what is synced; bytes after the checkpoint are cut off on the next attempt.
            if (try? file.sync()) != nil {
                saved.offset = file.offset
                try await store.saveCheckpoint(id, saved, restarted: false, now: clock.now)
            }
            return try Self.outcome(of: error, waitsForConnectivity: transfer.request.waitsForConnectivity)
        }
        do { try file.sync() } catch {
            // As a failed fsync in the body's loop: never trusted on a second try (fsyncgate).
            return .retry(reason: "\(error); going back to the last checkpoint", retryAfter: nil)
        }
        saved.offset = file.offset
        if saved.total == nil { saved.total = file.offset }  // no Content-Length: the end of the body is the end
        try await store.saveCheckpoint(id, saved, restarted: false, now: clock.now)
        guard saved.offset == saved.total else {
            return .retry(reason: "the body ended at \(saved.offset) of \(saved.total ?? 0) bytes", retryAfter: nil)
        }
        return finish(transfer, destination: destination, statusCode: head.status)
    }

    /// Verifies the body against the app's hash and moves it into place.
    private func finish(_ transfer: StoredTransfer, destination: String, statusCode: Int) -> Outcome {
        if let expected = transfer.request.sha256?.lowercased() {
            guard let actual = try? Self.sha256(ofFile: transfer.partialPath) else {
                return .failed(TransferError(.fileError, "cannot read the download back"), statusCode: statusCode)
            }
            guard actual == expected else {
                SafeFiles.remove(transfer.partialPath)
                return .failed(
                    TransferError(.checksumMismatch, "SHA-256 is \(actual), not \(expected)"), statusCode: statusCode)
            }
        }
        // The operator's downloads never replace what is at their destination (an app's land
        // under names bgd chose in its container), and get the mode any file the user makes gets
        // (0644 under a 022 umask); an app's stay 0600 in its container.
        do {
            if transfer.record.app == nil {
                try SafeFiles.giveMode(0o666 & ~configuration.userUmask, to: transfer.partialPath)
            }
            try SafeFiles.moveIntoPlace(transfer.partialPath, to: destination, replacing: transfer.record.app != nil)
        } catch {
            return .failed(
                TransferError(.fileError, "cannot move the download to \(destination): \(error.description)"),
                statusCode: statusCode)
        }
        if let unsynced = Self.syncName(of: destination, partial: transfer.partialPath) { return unsynced }
        Failpoint.transferAfterRename.hit()
        return .completed(file: destination, statusCode: statusCode)
    }

    /// Syncs the directory `destination` was renamed into; nil once the name is durable. If the
    /// sync fails the name may not survive a crash, and a failed sync is never tried again and
    /// trusted (D4): the file goes back under its partial name, and the attempt ends as a retry
    /// whose next attempt verifies it and moves it anew, with a sync of its own.
    private static func syncName(of destination: String, partial: String) -> Outcome? {
        do {
            try SafeFiles.syncDirectory(of: destination)
            return nil
        } catch {
            try? SafeFiles.moveIntoPlace(destination, to: partial, replacing: true)
            return .retry(reason: "\(error.description); moving the download into place again", retryAfter: nil)
        }
    }

    // MARK: Uploads

    private func upload(_ transfer: StoredTransfer) async throws -> Outcome {
        // The server took it, and bgd stopped before committing the completion: it is done, as
        // the server said; nothing is sent again (the copy stays until the completion commits).
        if let total = transfer.checkpoint.total, transfer.checkpoint.offset == total {
            return .completed(file: nil, statusCode: transfer.record.statusCode ?? 200)
        }
        // Opened as bgd made it (no link, one name), so what is sent is bgd's copy: an app that
        // put a link there would otherwise have its server sent a file it may not read.
        let size: Int64
        do {
            let opened = try SafeFiles.openForReading(transfer.partialPath)
            close(opened.descriptor)
            size = opened.size
        } catch {
            SafeFiles.remove(transfer.partialPath)  // a link, not what it points to
            return .failed(
                TransferError(.fileError, "bgd's copy of the upload is gone or replaced: \(error.description)"),
                statusCode: nil)
        }
        // Every attempt sends the whole file again; the key lets the server drop duplicates.
        let key = "bgd-\(transfer.record.id)-\(Int(transfer.record.createdAt.timeIntervalSince1970))"
        let path = transfer.partialPath
        let response: HTTPClientResponse
        do {
            response = try await send(transfer, method: transfer.request.httpMethod == "PUT" ? .PUT : .POST) { hop in
                var request = HTTPClientRequest(url: hop.url.absoluteString)
                request.method = hop.method
                request.headers.add(name: "Idempotency-Key", value: key)
                if hop.withBody {
                    request.headers.add(name: "Content-Type", value: "application/octet-stream")
                    request.body = .stream(FileChunks(path: path), length: .known(size))
                }
                return request
            }
            try await drain(response.body)
        } catch {
            return try Self.outcome(of: error, waitsForConnectivity: transfer.request.waitsForConnectivity)
        }
        let status = Int(response.status.code)
        switch status {
        case 200..<300:
            try await store.saveCheckpoint(
                transfer.record.id, DownloadCheckpoint(offset: size, total: size), restarted: false, statusCode: status,
                now: clock.now)
            Failpoint.transferAfterUploadAccepted.hit()
            return .completed(file: nil, statusCode: status)
        case _ where ResumeDecision.isRetryable(status: status):
            return .retry(reason: "HTTP \(status)", retryAfter: response.headers.first(name: "Retry-After"))
        default:
            SafeFiles.remove(transfer.partialPath)
            return .failed(TransferError(.httpError, "HTTP \(status)"), statusCode: status)
        }
    }

    // MARK: Helpers

    /// The request to the transfer's URL and on through its redirects (`Redirects`).
    private func send(
        _ transfer: StoredTransfer, method: HTTPMethod, request: (Redirects.Hop) -> HTTPClientRequest
    ) async throws -> HTTPClientResponse {
        let client = http(for: transfer.request)
        return try await Redirects.follow(
            from: transfer.request.url, method: method, request: request,
            send: { try await client.execute($0, timeout: .hours(24 * 7)) }, drain: drain)
    }

    /// What opening a path finds when a link, a FIFO or a directory is there, not a file.
    static let notAFile: Set<Int32> = [ELOOP, ENXIO, EISDIR, ENOTDIR]

    /// A network-level failure: TLS and a redirect `Redirects` refused are final, and so is a host that cannot be
    /// reached when the transfer does not wait for connectivity; the rest is worth retrying.
    static func outcome(of error: any Error, waitsForConnectivity: Bool = true) throws -> Outcome {
        if error is CancellationError { throw error }
        if let refusal = error as? Redirects.Refusal { return .failed(refusal.error, statusCode: nil) }
        if !waitsForConnectivity, isConnectFailure(error) {
            return .failed(TransferError(.cannotConnect, describeConnectFailure(error)), statusCode: nil)
        }
        if let failure = error as? PartialFile.Failure, failure.code == ENOSPC || failure.code == EDQUOT {
            // Keep the partial file and wait for room (reliability-matrix D11): looked at again
            // every 30 s, so the transfer goes on once space is freed.
            return .retry(
                reason: "waitingForSpace: no space left for the download (\(failure)); trying again when there is",
                retryAfter: "30")
        }
        if error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError {
            return .failed(TransferError(.tls, "\(error)"), statusCode: nil)
        }
        return .retry(reason: isConnectFailure(error) ? describeConnectFailure(error) : "\(error)", retryAfter: nil)
    }

    /// The request never reached the server: the name did not resolve, the connection was refused
    /// or timed out, the host or network is unreachable.
    static func isConnectFailure(_ error: any Error) -> Bool {
        if error is NIOConnectionError || error is SocketAddressError || error is SocketAddressError.UnknownHost {
            return true
        }
        if let client = error as? HTTPClientError, client == .connectTimeout { return true }
        if case ChannelError.connectTimeout = error { return true }
        if let io = error as? IOError {
            return [ECONNREFUSED, EHOSTUNREACH, ENETUNREACH, EADDRNOTAVAIL, ETIMEDOUT].contains(io.errnoCode)
        }
        return false
    }

    /// "connection refused", "host not found: example.invalid" — not NIO's type dumps.
    static func describeConnectFailure(_ error: any Error) -> String {
        if let io = error as? IOError { return String(cString: strerror(io.errnoCode)).lowercased() }
        if let connection = error as? NIOConnectionError {
            if let io = connection.connectionErrors.lazy.compactMap({ $0.error as? IOError }).first {
                return String(cString: strerror(io.errnoCode)).lowercased()
            }
            if connection.dnsAError != nil || connection.dnsAAAAError != nil {
                return "host not found: \(connection.host)"
            }
        }
        if case SocketAddressError.unknown(let host, _) = error { return "host not found: \(host)" }
        if let unknown = error as? SocketAddressError.UnknownHost { return "host not found: \(unknown.host)" }
        if let client = error as? HTTPClientError, client == .connectTimeout { return "connection timed out" }
        return "\(error)"
    }

    static func sha256(ofFile path: String) throws -> String {
        let handle = FileHandle(fileDescriptor: try SafeFiles.openForReading(path).descriptor, closeOnDealloc: true)
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

/// A file bgd made as a stream of 256 KiB buffers, for upload bodies; opened as
/// `SafeFiles.openForReading` does (no link, one name) each time a request's body is sent.
struct FileChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let path: String

    struct AsyncIterator: AsyncIteratorProtocol {
        let handle: Result<FileHandle, SafeFiles.Refusal>
        mutating func next() async throws -> ByteBuffer? {
            let handle = try handle.get()
            guard let data = try handle.read(upToCount: 256 << 10), !data.isEmpty else { return nil }
            return ByteBuffer(bytes: data)
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(
            handle: Result { () throws(SafeFiles.Refusal) in
                FileHandle(fileDescriptor: try SafeFiles.openForReading(path).descriptor, closeOnDealloc: true)
            })
    }
}
