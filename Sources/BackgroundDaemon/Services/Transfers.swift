import BackgroundModel
import BackgroundStore
import Foundation

/// Background transfers as callers use them: an app its own (it never sees, cancels or learns of
/// another app's), the operator all. `TransferService` carries them out; this is what the API
/// asks of it.
struct Transfers: Sendable {
    /// Who asks: an app about its own transfers, or the operator.
    enum Caller: Equatable, Sendable {
        case app(AppID)
        case `operator`
    }

    enum Refusal: Error, Equatable {
        /// An app's downloads land in its container.
        case destinationNotAllowed(forApp: Bool)
        /// The operator's download for no app needs an absolute destination.
        case destinationRequired
        case invalid(String)
    }

    let service: TransferService
    let store: BackgroundStore
    let apps: Apps
    let waiter: ActivityWaiter

    /// Takes a transfer over, for the app that asks or, from the operator, for `owner` (or none).
    func submit(
        _ transfer: TransferRequest, from caller: Caller, for owner: AppID? = nil
    ) async throws
        -> TransferRecord
    {
        let app: AppID?
        switch caller {
        case .app(let id):
            if transfer.destination != nil { throw Refusal.destinationNotAllowed(forApp: true) }
            app = id
        case .operator:
            if let owner {
                _ = try await apps.require(owner)
                if transfer.destination != nil { throw Refusal.destinationNotAllowed(forApp: false) }
            } else if transfer.kind == .download {
                // Checked further where it is used (TransferService.checkedDestination).
                guard let destination = transfer.destination, destination.hasPrefix("/") else {
                    throw Refusal.destinationRequired
                }
            }
            app = owner
        }
        if let problem = transfer.problem { throw Refusal.invalid(problem) }
        if case .app(let id) = caller {
            if try await store.outstandingTransferCount(of: id) >= Self.maximumOutstandingPerApp {
                throw ServiceError.tooManyTransfers(id)
            }
            if try await store.openEventCount(for: id) >= Self.maximumUnacknowledgedEventsPerApp {
                throw ServiceError.tooManyUnacknowledgedEvents(id)
            }
        }
        return try await service.submit(transfer, from: app)
    }

    /// The most transfers an app may have outstanding (not ended). Each costs every planning
    /// pass a little and its row, and one may wait up to 366 days: an app submitting without
    /// end made each pass cost a second of CPU at 7,750. Far above what a background session
    /// holds; the operator's own downloads are not counted.
    static let maximumOutstandingPerApp = 1000

    /// The most events an app may leave unacknowledged and still start transfers. Each ended
    /// transfer leaves the app one to three events, kept until it acknowledges them (and the
    /// transfer's row with them), so an app that never does would grow bgd without end; a fetch's
    /// or a push's events close when its run ends, so transfers are the only way to this cap.
    static let maximumUnacknowledgedEventsPerApp = 10_000

    /// The caller's transfers (an app's, optionally of one session), with live progress.
    func list(for caller: Caller, session: String? = nil, limit: Int = 200) async throws -> [TransferRecord] {
        var records: [TransferRecord] = []
        switch caller {
        case .app(let id): records = try await store.transfers(app: id, session: session, limit: limit)
        case .operator: records = try await store.transfers(limit: limit)
        }
        var live: [TransferRecord] = []
        for record in records { live.append(await service.live(record)) }
        return live
    }

    /// One transfer; with a wait, once it has ended or been paused, or the wait has passed on
    /// bgd's clock.
    func transfer(
        _ id: TransferID, for caller: Caller, waitingUpTo timeout: Duration = .zero
    ) async throws
        -> TransferRecord
    {
        try await own(id, by: caller)
        // Waits for it to end, or to be paused: a watcher (bgctl download) must hear that it
        // moves no more, and a long poll woken only by the end left it waiting for good.
        let record = try await waiter.awaitEnd(
            timeout: timeout, read: { try await store.transfer(id)?.record },
            hasEnded: { $0.state.isFinal || $0.state == .paused },
            match: { activity in
                switch activity {
                case .transferEnded(let record) where record.id == id,
                    .transferPaused(let record) where record.id == id:
                    return record
                default: return nil
                }
            })
        guard let record else { throw ServiceError.unknownTransfer(id) }
        return await service.live(record)
    }

    /// Cancels; the app hears `cancelled` once.
    func cancel(_ id: TransferID, by caller: Caller) async throws -> TransferRecord {
        try await own(id, by: caller)
        guard let record = try await service.cancel(id) else { throw ServiceError.unknownTransfer(id) }
        return record
    }

    /// `cancel(byProducingResumeData:)`.
    func pause(_ id: TransferID, by caller: Caller) async throws -> TransferResumeData {
        try await own(id, by: caller)
        let reason = caller == .operator ? "paused by the operator" : "paused by the app"
        guard let data = try await service.pause(id, reason: reason) else {
            throw try await exists(id) ? ServiceError.transferNotActive(id) : ServiceError.unknownTransfer(id)
        }
        return data
    }

    func resume(_ id: TransferID, by caller: Caller) async throws -> TransferRecord {
        try await own(id, by: caller)
        guard let record = try await service.resume(id) else {
            throw try await exists(id) ? ServiceError.transferNotPaused(id) : ServiceError.unknownTransfer(id)
        }
        return record
    }

    /// Whether bgd has a transfer `id` at all: "no transfer 999" says more than "not paused".
    private func exists(_ id: TransferID) async throws -> Bool { try await store.transfer(id) != nil }

    /// `bgctl transfers retry`: a waiting or paused transfer goes now; the operator's download
    /// that failed or was cancelled starts again as a new transfer of the same request (an app
    /// has already heard how its transfer ended, so submitting again is the app's to do).
    func retry(_ id: TransferID, by caller: Caller) async throws -> TransferRecord {
        try await own(id, by: caller)
        if let record = try await service.retryNow(id) { return record }
        guard let stored = try await store.transfer(id) else { throw ServiceError.unknownTransfer(id) }
        guard stored.record.state.isFinal, stored.record.state != .completed else {
            throw ServiceError.transferNotRetryable(
                id, stored.record.state == .completed ? "it has completed" : "it is running")
        }
        guard stored.record.app == nil, caller == .operator else {
            throw ServiceError.transferNotRetryable(id, "an app's transfer that ended is the app's to submit again")
        }
        return try await submit(stored.request, from: .operator)
    }

    /// Another app's transfer is "unknown", not "forbidden", so that ids reveal nothing.
    private func own(_ id: TransferID, by caller: Caller) async throws {
        guard case .app(let app) = caller else { return }
        guard let stored = try await store.transfer(id), stored.record.app == app else {
            throw ServiceError.unknownTransfer(id)
        }
    }
}
