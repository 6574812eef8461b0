import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import BackgroundTransfers
import Foundation
import Logging
import ServiceLifecycle
import Synchronization

/// Carries background transfers through their lives: takes them over, decides when each may
/// make an attempt (its retry time, the machine's conditions, a concurrency limit, its resource
/// and no-progress timeouts), has the `TransferEngine` make it, and records the ending with the
/// app's events, then tells or launches the app.
///
/// The store is the truth: every attempt, checkpoint and ending is committed before it counts,
/// so a `kill -9` at any moment loses at most the bytes since the last checkpoint.
public actor TransferService: Service {
    public struct Configuration: Sendable {
        /// Transfers moving bytes at once.
        public var maximumConcurrent: Int
        public var backoff: RetryBackoff
        /// A transfer that moves no byte for this long fails with `noProgress` (BITS's default is 14 days).
        public var noProgressTimeout: Duration
        /// Checkpoints, timeouts and TLS trust for each attempt.
        public var engine: TransferEngine.Configuration
        /// The most bytes of upload copies bgd holds for one app (nil: no limit). An upload is
        /// copied when it is handed over, and kept until it ends; without a limit one app's
        /// 1,000 waiting uploads of a large file could fill the disk, and bgd would then take
        /// nothing new from any app. The operator's own uploads are not counted.
        public var uploadQuota: Int64?

        /// An app's uploads may hold 4 GiB: a long video, many photos, far above what a
        /// background session usually hands over, and a bound on a small disk.
        public static let defaultUploadQuota: Int64 = 4 << 30

        public init(
            maximumConcurrent: Int = 6, backoff: RetryBackoff = RetryBackoff(),
            noProgressTimeout: Duration = .seconds(86400),
            engine: TransferEngine.Configuration = .init(), uploadQuota: Int64? = defaultUploadQuota
        ) {
            self.maximumConcurrent = max(1, maximumConcurrent)
            self.backoff = backoff
            self.noProgressTimeout = noProgressTimeout
            self.engine = engine
            self.uploadQuota = uploadQuota
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
    private let engine: TransferEngine
    /// When each transfer may make an attempt.
    private let policy: TransferPolicy
    /// Attempts in flight, so a cancel can stop one and the loop knows the free slots.
    private var attempts: [TransferID: Task<Void, Never>] = [:]
    /// Bytes received by running attempts, checkpointed or not: progress, not a promise.
    private var received: [TransferID: Int64] = [:]
    /// Transfers being cancelled or paused: no new attempt may start while that is recorded.
    private var stopping: Set<TransferID> = []
    /// Bytes of uploads being copied, per app: counted against its quota before their files
    /// are whole, so two submissions at once cannot both pass it.
    private var copying: [AppID: Int64] = [:]

    /// The record with its live progress.
    func live(_ record: TransferRecord) -> TransferRecord {
        var record = record
        record.bytesReceived = received[record.id]
        return record
    }

    init(
        store: BackgroundStore, stateDirectory: StateDirectory, coordinator: RunCoordinator, broker: EventBroker,
        conditions: ConditionsMonitor, activity: ActivityFeed, clock: any WallClock, configuration: Configuration,
        lowBatteryLevel: Int, doorbell: Doorbell, logger: Logger
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
        engine = TransferEngine(store: store, clock: clock, configuration: configuration.engine)
        policy = TransferPolicy(
            noProgressTimeout: configuration.noProgressTimeout, maximumConcurrent: configuration.maximumConcurrent,
            gate: ConditionGate(lowBatteryLevel: lowBatteryLevel),
            longestRetryWait: max(
                configuration.backoff.maximum, .seconds(configuration.backoff.retryAfterRange.upperBound))
                + .seconds(60))
    }

    // MARK: Service

    public func run() async throws {
        // Events a previous bgd committed but never got to an app (it stopped between the two):
        // launch the app for them now, as their transfer's end would have — only if it would
        // have (a session with `sessionSendsLaunchEvents` off waits for the app to connect).
        // Before, every such app was launched at every start of bgd.
        for app in (try? await store.appsWithWaitingSessionEvents()) ?? [] where await sendsLaunchEvents(app) {
            logger.info("Delivering transfer events left from before", metadata: ["app.id": "\(app)"])
            await coordinator.deliverEvents(to: app)
        }
        await doorbell.serve("transfers", on: clock, logger: logger, looking: { try await self.plan() })
        for task in attempts.values { task.cancel() }
        for task in attempts.values { await task.value }
        await engine.shutdown()
    }

    /// Something changed (a new transfer, conditions, a cancel): plan again.
    nonisolated func replan() { doorbell.ring() }

    // MARK: Requests from the API

    /// Takes a transfer over. Uploads are copied now, so the app may delete its file.
    ///
    /// An app's files stay in its container: its downloads land there, and what it uploads must
    /// be a regular file there, reached without following a link out. The operator's download
    /// goes to `destination`, which may not be inside bgd's own state and never replaces
    /// anything; its partial file sits beside it (one file system, so the last move is a rename).
    func submit(_ request: TransferRequest, from app: AppID?) async throws -> TransferRecord {
        let directory = try transferDirectory(for: app)
        let name = Self.safeName(for: request.url)
        var upload: Int32?
        if request.kind == .upload, let source = request.uploadFile {
            upload =
                try app.map { try SafeFiles.openBeneath(stateDirectory.containerPath(for: $0), path: source) }
                ?? operatorUpload(source)
        }
        defer { if let upload { close(upload) } }
        // The upload is the file as it is now: what its app writes to it later is not copied.
        let uploadSize = try upload.map { descriptor in try SafeFiles.size(ofOpen: descriptor) }
        var reserved: (app: AppID, bytes: Int64)?
        if let app, let size = uploadSize, let quota = configuration.uploadQuota {
            // Checked and reserved before the first suspension: the actor runs nothing else between.
            let held = TransferFiles.uploadBytes(in: directory) + copying[app, default: 0]
            guard size <= quota - min(held, quota) else {
                throw ServiceError.uploadQuotaExceeded(app, held: held, size: size, quota: quota)
            }
            copying[app, default: 0] += size
            reserved = (app, size)
        }
        defer { if let reserved { copying[reserved.app, default: 0] -= reserved.bytes } }
        let destination =
            try app == nil && request.kind == .download ? request.destination.map(checkedDestination) : nil
        // An upload's copy is made whole and synced under a name of its own first, and renamed to
        // `<id>.upload` in the transaction that makes the transfer: a crash leaves a whole copy
        // with its transfer, or a copy with none (the start-up sweep removes it) — never a
        // transfer waiting with half a copy, which would send the half and call it done.
        var copy: String?
        if let upload {
            let path = directory + "/" + TransferFiles.copyingName()
            do { try SafeFiles.copy(from: upload, to: path, limit: uploadSize ?? .max) } catch {
                SafeFiles.remove(path)
                throw error
            }
            copy = path
            Failpoint.transferAfterUploadCopy.hit()
        }
        let placed = Mutex<String?>(nil)
        let stored: StoredTransfer
        do {
            stored = try await store.createTransfer(request, app: app, now: clock.now) { [copy] id in
                if request.kind == .upload {
                    let path = directory + "/\(id).upload"
                    if let copy {
                        try SafeFiles.moveIntoPlace(copy, to: path, replacing: true)
                        placed.withLock { $0 = path }
                        // Not made durable, not made: the request fails, and nothing of it stays.
                        try SafeFiles.syncDirectory(of: path)
                    }
                    return (path, nil)
                }
                if let destination {
                    let folder = (destination as NSString).deletingLastPathComponent
                    return (
                        folder + "/." + (destination as NSString).lastPathComponent + ".bgd-\(id).partial", destination
                    )
                }
                return (directory + "/\(id).partial", directory + "/\(id)-\(name)")
            }
        } catch {
            // Not made: neither is its copy, under either name.
            if let copy { SafeFiles.remove(copy) }
            if let path = placed.withLock({ $0 }) { SafeFiles.remove(path) }
            throw error
        }
        replan()
        return try await store.transfer(stored.record.id)?.record ?? stored.record
    }

    /// Cancels: the attempt stops, the partial file goes, the app hears `cancelled` once.
    func cancel(_ id: TransferID) async throws -> TransferRecord? {
        stopping.insert(id)
        defer { stopping.remove(id) }
        attempts[id]?.cancel()
        await attempts[id]?.value
        guard let stored = try await store.transfer(id) else { return nil }
        return try await endCancelled(stored) ?? stored.record
    }

    /// A transfer left paused past the retention (`HistoryPruner`) is cancelled as `cancel`
    /// does — the app hears `cancelled`, the partial file goes — if it is paused still.
    func expireIfStillPaused(_ id: TransferID) async throws -> Bool {
        guard attempts[id] == nil, let stored = try await store.transfer(id) else { return false }
        return try await endCancelled(stored, onlyIf: [.paused]) != nil
    }

    /// Records `stored` cancelled (if it has not ended, and is in `states` when given), removes
    /// its partial file and tells its app; the ended record, or nil when nothing was ended.
    private func endCancelled(
        _ stored: StoredTransfer, onlyIf states: Set<TransferState>? = nil
    ) async throws
        -> TransferRecord?
    {
        guard let ended = try await store.finishTransfer(stored.record.id, .cancelled, now: clock.now, onlyIf: states)
        else { return nil }
        SafeFiles.remove(stored.partialPath)
        await announce(ended)
        return ended
    }

    /// `cancel(byProducingResumeData:)`: stops and keeps the checkpoint.
    func pause(_ id: TransferID, reason: String) async throws -> TransferResumeData? {
        stopping.insert(id)
        defer { stopping.remove(id) }
        attempts[id]?.cancel()
        await attempts[id]?.value
        guard let paused = try await store.pauseTransfer(id, reason: reason, now: clock.now) else { return nil }
        activity.emit(.transferPaused(paused.record))
        return TransferResumeData(transfer: id, bytesTransferred: paused.checkpoint.offset)
    }

    func resume(_ id: TransferID) async throws -> TransferRecord? {
        let resumed = try await store.resumeTransfer(id, now: clock.now)
        if resumed != nil { retriesDue[id] = nil }
        replan()
        return resumed?.record
    }

    /// Makes a waiting or paused transfer go now; nil if it is running or has ended.
    func retryNow(_ id: TransferID) async throws -> TransferRecord? {
        guard attempts[id] == nil, let retried = try await store.retryTransferNow(id) else { return nil }
        retriesDue[id] = nil
        replan()
        return retried.record
    }

    // MARK: Planning

    /// The retries this bgd scheduled, recorded or not, and when each may go: on `elapsed`, so
    /// the wall clock set back does not put them off (the store's dates would wait for it to
    /// catch up), and a retry the disk would not take still waits its turn.
    private var retriesDue: [TransferID: Duration] = [:]

    /// A retry `left` away, as a date from `now`; within a millisecond (the store's grain, and
    /// a date's rounding when time was moved to the retry's date) it is due.
    static func retryDate(in left: Duration, from now: Date) -> Date {
        left <= .milliseconds(1) ? now : now.adding(left)
    }

    /// Starts what `TransferPolicy` lets start; returns when to look again: at the policy's
    /// dates, or when the first retry's wait has really passed, whichever comes first.
    private func plan() async throws -> Doorbell.NextLook {
        // Read together: retries are on `elapsed`, said as dates from `now`.
        let (now, elapsed) = (clock.now, clock.elapsed)
        let conditions = await self.conditions.effective
        var next: Date?
        var nextElapsed: Duration?
        func wake(at date: Date) { next = min(next ?? date, date) }
        let active = try await store.activeTransfers()
        forgetNotes(keeping: Set(active.map(\.record.id)))
        for transfer in active
        where attempts[transfer.record.id] == nil && !stopping.contains(transfer.record.id) {
            let id = transfer.record.id
            let snapshot = TransferPolicy.Snapshot(
                request: transfer.request, createdAt: transfer.record.createdAt,
                lastProgressAt: transfer.lastProgressAt, attempts: transfer.record.attempts,
                nextAttemptAt: transfer.record.nextAttemptAt,
                heldUntil: retriesDue[id].map { due in Self.retryDate(in: due - elapsed, from: now) },
                silentFor: clock.elapsed - (progressSeen[id] ?? noteFirstSeen(id)), lastError: transfer.record.lastError
            )
            let decision = policy.decide(snapshot, conditions: conditions, attemptsRunning: attempts.count, now: now)
            if let at = decision.lookAgainAt { wake(at: at) }
            switch decision.action {
            case .fail(let error): await fail(transfer, error)
            case .waitForRetry:
                if let due = retriesDue[id], due > elapsed { nextElapsed = min(nextElapsed ?? due, due) }
            case .hold(let reason):
                if try await store.setWaiting(id, reason: reason.detail) {
                    activity.emit(.transferHeld(id, reason: reason.detail))
                }
            case .attempt:
                // The silence that fails a transfer starts at its first attempt: one held for
                // days by its begin date or on battery failed for want of progress at the first
                // answer without bytes.
                if transfer.record.attempts == 0 { progressSeen[id] = elapsed }
                attempts[id] = Task { await self.attempt(id) }
            }
        }
        return Doorbell.NextLook(at: next, elapsed: nextElapsed)
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
            // The app may have put a link in place of its transfers directory since: undone.
            if let app = transfer.record.app { _ = try transferDirectory(for: app) }
            activity.emit(.transferAttemptStarted(id))
            let activity = self.activity
            let broker = self.broker
            let observer = TransferEngine.Observer(
                receiving: { id, from in activity.emit(.transferReceiving(id, from: from)) },
                checkpointed: { id, bytes in activity.emit(.transferCheckpointed(id, bytes: bytes)) },
                progress: { transfer, bytes, expected in
                    await self.noteReceived(transfer.record.id, bytes: bytes)
                    if let app = transfer.record.app {
                        broker.send(
                            .transferProgress(
                                transfer: transfer.record.id, session: transfer.record.session, bytesTransferred: bytes,
                                bytesExpected: expected),
                            to: app)
                    }
                })
            switch try await engine.attempt(transfer, observer: observer) {
            case .completed(let file, let statusCode):
                // The file is in place: the completion is committed even if a cancel came while
                // the engine hashed and moved it (the store's calls stop in a cancelled task).
                // Before, the cancel won: the transfer said cancelled, the app never heard of
                // the file, and it stayed at its destination for good. A cancel of a transfer
                // that finished changes nothing, as `URLSessionTask.cancel()` after completion.
                try await Task { try await self.complete(transfer, file: file, statusCode: statusCode) }.value
            case .retry(let reason, let retryAfter):
                // Read again: the engine may have moved or dropped the checkpoint.
                await retry(try await store.transfer(id) ?? transfer, reason: reason, retryAfter: retryAfter)
            case .failed(let error, let statusCode):
                await fail(transfer, error, statusCode: statusCode)
            }
        } catch is CancellationError {
            return  // cancelled or paused: whoever cancelled records it
        } catch {
            logger.error(
                "Transfer attempt failed unexpectedly", metadata: ["transfer.id": "\(id)", "error": "\(error)"])
            if let transfer = try? await store.transfer(id) {
                await retry(transfer, reason: "\(error)", retryAfter: nil)
            }
        }
    }

    private func noteReceived(_ id: TransferID, bytes: Int64) {
        received[id] = bytes
        progressSeen[id] = clock.elapsed
    }

    /// When this bgd last saw the transfer move (or first saw it), on the clock no one sets.
    private var progressSeen: [TransferID: Duration] = [:]

    /// How many transfers this service holds notes of (tests: no more than are outstanding).
    package var transfersNoted: Int { Set(progressSeen.keys).union(retriesDue.keys).count }

    /// Drops what is noted of transfers no longer outstanding that ended without `announce`: an
    /// app unregistered takes its transfers with it, and their notes stayed for as long as bgd
    /// ran.
    private func forgetNotes(keeping outstanding: Set<TransferID>) {
        func kept(_ id: TransferID) -> Bool { outstanding.contains(id) || attempts[id] != nil }
        progressSeen = progressSeen.filter { kept($0.key) }
        retriesDue = retriesDue.filter { kept($0.key) }
    }

    /// One planning pass now, as the doorbell's would be (tests: without waiting for it).
    package func planOnce() async throws { _ = try await plan() }

    private func noteFirstSeen(_ id: TransferID) -> Duration {
        progressSeen[id] = clock.elapsed
        return clock.elapsed
    }

    private func complete(_ transfer: StoredTransfer, file: String?, statusCode: Int?) async throws {
        if let ended = try await store.finishTransfer(
            transfer.record.id, .completed(location: file, statusCode: statusCode), now: clock.now)
        {
            // An upload's copy goes once its completion is committed, not before: a crash in
            // between must find the copy and the server's answer (see the engine's `upload`).
            if transfer.request.kind == .upload { SafeFiles.remove(transfer.partialPath) }
            logger.info(
                "Transfer completed", metadata: ["transfer.id": "\(transfer.record.id)", "file": "\(file ?? "-")"])
            Failpoint.transferAfterCompletionCommit.hit()
            await announce(ended)
        }
    }

    // MARK: Endings

    private func retry(_ transfer: StoredTransfer, reason: String, retryAfter: String?) async {
        let (now, elapsed) = (clock.now, clock.elapsed)
        let failures = transfer.consecutiveFailures + 1
        // Whole seconds: the store keeps milliseconds, and a retry time read back later than the
        // one planned would wait for a clock tick that never comes.
        let jittered = configuration.backoff.delay(
            afterFailures: failures, retryAfter: retryAfter,
            jitter: RetryBackoff.jitter(for: transfer.record.id, afterFailures: failures), now: now)
        let delay = Duration.seconds(jittered.seconds.rounded(.up))
        do {
            guard try await store.scheduleRetry(transfer.record.id, error: reason, at: now.adding(delay)) else {
                retriesDue[transfer.record.id] = nil  // gone or ended meanwhile: nothing to wait for
                return
            }
            activity.emit(.transferRetryScheduled(transfer.record.id, at: now.adding(delay), reason: reason))
            logger.info(
                "Transfer will retry",
                metadata: [
                    "transfer.id": "\(transfer.record.id)", "reason": "\(reason)", "in": "\(delay.humanDescription)",
                ])
            retriesDue[transfer.record.id] = elapsed + delay
        } catch {
            // Keep the backoff anyway, or the transfer would be due at once and go round as fast
            // as the disk refuses (a full disk made hundreds of attempts a second).
            retriesDue[transfer.record.id] = elapsed + max(delay, .seconds(30))
            logger.error(
                "Cannot record a retry; waiting anyway",
                metadata: ["transfer.id": "\(transfer.record.id)", "error": "\(error)"])
        }
    }

    private func fail(_ transfer: StoredTransfer, _ error: TransferError, statusCode: Int? = nil) async {
        do {
            if let ended = try await store.finishTransfer(
                transfer.record.id, .failed(error, statusCode: statusCode), now: clock.now)
            {
                // Nothing resumes a failed transfer (a retry is a new one): its upload copy or
                // partial download is the disk's again, as a cancelled one's is.
                SafeFiles.remove(transfer.partialPath)
                logger.info("Transfer failed", metadata: ["transfer.id": "\(transfer.record.id)", "error": "\(error)"])
                await announce(ended)
            }
        } catch {
            logger.error(
                "Cannot record a failed transfer",
                metadata: ["transfer.id": "\(transfer.record.id)", "error": "\(error)"])
        }
    }

    /// Whether any of the app's waiting transfer events is of a session that launches the app
    /// for its events (as `announce` decides; a transfer no longer known counts as one that does).
    package func sendsLaunchEvents(_ app: AppID) async -> Bool {
        let waiting = (try? await store.openEvents(for: app)) ?? []
        let transfers = waiting.compactMap { event -> TransferID? in
            switch event.body {
            case .downloadFinished(let transfer, _, _, _), .transferCompleted(let transfer, _, _, _, _): transfer
            default: nil
            }
        }
        guard !transfers.isEmpty else { return true }
        for transfer in Set(transfers) {
            if (try? await store.transfer(transfer))?.request.sessionSendsLaunchEvents ?? true { return true }
        }
        return false
    }

    /// The ending is committed with its events: now tell (or launch) the app. With
    /// `sessionSendsLaunchEvents` off, the events wait until the app next connects.
    private func announce(_ ended: TransferRecord) async {
        // What this bgd noted of the transfer goes with it: one entry per transfer ever made,
        // otherwise, for as long as bgd runs.
        progressSeen[ended.id] = nil
        retriesDue[ended.id] = nil
        activity.emit(.transferEnded(ended))
        guard let app = ended.app else { return }
        let launches = (try? await store.transfer(ended.id))?.request.sessionSendsLaunchEvents ?? true
        if launches {
            await coordinator.deliverEvents(to: app)
        } else {
            broker.eventsAvailable(for: app)
        }
    }

    // MARK: Helpers

    /// The operator's destination, made absolute through its real directory; refused when it
    /// is inside bgd's state directory, names a directory, or something is already there.
    func checkedDestination(_ destination: String) throws(SafeFiles.Refusal) -> String {
        let name = (destination as NSString).lastPathComponent
        guard destination.hasPrefix("/"), !destination.hasSuffix("/"), !name.isEmpty, name != ".", name != ".." else {
            throw SafeFiles.Refusal(
                .destinationInvalid, "'destination' must be an absolute path to a file, not \(destination)")
        }
        let folder = (destination as NSString).deletingLastPathComponent
        guard let resolved = Self.realPath(folder) else {
            throw SafeFiles.Refusal(.destinationDirectoryMissing, "the directory of \(destination) does not exist")
        }
        // The socket, its lock and the operator token are files: "something is already there".
        if let root = Self.realPath(stateDirectory.path), resolved == root || resolved.hasPrefix(root + "/") {
            throw SafeFiles.Refusal(
                .destinationProtected,
                "\(destination) is inside bgd's state directory (\(root)); bgd never writes a download there")
        }
        let path = (resolved == "/" ? "" : resolved) + "/" + name
        var info = stat()
        guard lstat(path, &info) != 0, errno == ENOENT else {
            throw SafeFiles.Refusal(
                .destinationExists,
                "something is already at \(path); bgd does not replace it: remove it or choose another name")
        }
        return path
    }

    /// The operator's upload: any regular file bgd's user can read, but not bgd's own state.
    private func operatorUpload(_ source: String) throws(SafeFiles.Refusal) -> Int32 {
        if let resolved = Self.realPath(source), let root = Self.realPath(stateDirectory.path),
            resolved.hasPrefix(root + "/")
        {
            throw SafeFiles.Refusal(
                .uploadFileProtected, "\(source) is inside bgd's state directory; bgd never uploads its own state")
        }
        let descriptor = open(source, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw SafeFiles.Refusal(
                .uploadFileUnreadable,
                "bgd cannot read \(source) (\(String(cString: strerror(errno)))); give a file bgd's user can read")
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            close(descriptor)
            throw SafeFiles.Refusal(.notRegularFile, "\(source) is not a regular file")
        }
        return descriptor
    }

    static func realPath(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Where the transfer files of `app` (or the operator's uploads) go, made if missing. An
    /// app's is in its container, which the app may write: a `transfers` it made a link (or a
    /// file) is put back as bgd's own directory, and every write there refuses to follow a link
    /// in its place (`SafeFiles.openDirectory(of:)`), should the app swap one in after this.
    private func transferDirectory(for app: AppID?) throws -> String {
        let directory = stateDirectory.transfersPath(for: app)
        if let app {
            _ = try stateDirectory.container(for: app)  // 0700, made by bgd
            if let type = TransferFiles.type(of: directory), type != S_IFDIR {
                logger.warning(
                    "An app's transfers directory was not a directory; bgd made it one again",
                    metadata: ["app.id": "\(app)", "path": "\(directory)"])
                unlink(directory)
            }
        }
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
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
}
