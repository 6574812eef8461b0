import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import BackgroundTransfers
import Foundation
import Logging
import ServiceLifecycle

/// Keeps the store bounded while bgd runs for months: a pruning pass soon after start and then
/// every `interval`, in small transactions (`BackgroundStore.prune`), so the tables and the file
/// level off at what `retention` keeps. One timer every few hours, nothing while it waits.
public struct HistoryPruner: Service {
    public struct Configuration: Hashable, Sendable {
        public var retention: BackgroundStore.Retention
        /// Between passes.
        public var interval: Duration

        public init(retention: BackgroundStore.Retention = .init(), interval: Duration = .seconds(6 * 3600)) {
            self.retention = retention
            self.interval = max(.seconds(60), interval)
        }
    }

    let store: BackgroundStore
    let configuration: Configuration
    let clock: any WallClock
    let doorbell: Doorbell
    let activity: ActivityFeed?
    /// Told of each app whose transfer events a pass expired, with how many it has still open:
    /// a run launched for them has nothing left to deliver (`RunCoordinator.eventsExpired`).
    let eventsExpired: (@Sendable (AppID, _ openRemaining: Int) async -> Void)?
    /// Cancels a transfer paused and left for the retention, if it is paused still; true when it was.
    let expirePaused: (@Sendable (TransferID) async throws -> Bool)?
    let logger: Logger
    /// The wall clock's steps forward since bgd started, which a pass does not count as time
    /// passed (`StampAges`).
    private let jumps: WallClockJumps

    public init(
        store: BackgroundStore, configuration: Configuration, clock: any WallClock, doorbell: Doorbell = Doorbell(),
        activity: ActivityFeed? = nil, eventsExpired: (@Sendable (AppID, _ openRemaining: Int) async -> Void)? = nil,
        expirePaused: (@Sendable (TransferID) async throws -> Bool)? = nil, logger: Logger
    ) {
        self.expirePaused = expirePaused
        self.activity = activity
        self.eventsExpired = eventsExpired
        self.store = store
        self.configuration = configuration
        self.clock = clock
        self.doorbell = doorbell
        self.logger = logger
        let retention = configuration.retention
        jumps = WallClockJumps(
            clock: clock, remembered: max(retention.history, retention.opens, FetchYield.answerMemory))
    }

    public func run() async throws {
        // Every `interval` of time that passes: a wall-clock date put the next pass a day away
        // when the clock was set back a day.
        await doorbell.serve(
            "retention", on: clock, logger: logger,
            looking: {
                try await pass()
                return Doorbell.NextLook(elapsed: clock.elapsed + configuration.interval)
            })
    }

    /// One pruning pass. `run` makes one now and then; a test makes one and sees what it throws.
    public func pass() async throws {
        if !jumps.isRestored { await restoreSteps() }
        // The step is saved before anything else is tried, and a carry the store did not take is
        // tried again at the next pass: before, a pass that failed there (a full disk) forgot the
        // jump, the step went unsaved, and after a restart the first pass pruned as old
        // everything stamped before it.
        _ = jumps.forwardJump()
        if !jumps.isSaved { await saveSteps() }
        try await step("carrying events across the clock's step") {
            // In order: events stamped before two jumps are carried across both.
            for jump in jumps.uncarried {
                try await carryForward(across: jump)
                jumps.markCarried(jump)
            }
        }
        let ages = jumps.ages()
        try await step("expiring unacknowledged events") { try await expireUnacknowledged(ages: ages) }
        try await step("cancelling abandoned pauses") { try await expireAbandonedPauses(ages: ages) }
        let report = try await store.prune(configuration.retention, ages: ages)
        if report.rowsDeleted > 0 {
            logger.info(
                "Pruned finished history",
                metadata: [
                    "runs": "\(report.runs)", "events": "\(report.events)", "pushes": "\(report.pushes)",
                    "transfers": "\(report.transfers)", "opens": "\(report.opens)",
                    "pages.freed": "\(report.pagesFreed)",
                ])
        }
        activity?.emit(.historyPruned(rows: report.rowsDeleted))
    }

    /// One step before the prune. One that fails is said, and the pass goes on: a step that
    /// failed at every pass (a row that cannot be read) stopped every later one, and so all
    /// pruning, for good.
    private func step(_ name: String, _ body: () async throws -> Void) async throws {
        do {
            try await body()
        } catch where error is CancellationError || Task.isCancelled {
            throw CancellationError()  // bgd is stopping: not a failed step
        } catch {
            logger.error("A pruning step failed; the pass goes on", metadata: ["step": "\(name)", "error": "\(error)"])
        }
    }

    /// The steps a bgd before this one saw. Ones that cannot be read are said and left: pruning
    /// must go on (a pass that threw at every start pruned nothing, ever).
    private func restoreSteps() async {
        do {
            jumps.restore(try await store.wallClockSteps())
        } catch {
            logger.error(
                "Cannot read the wall clock's saved steps; going on without them", metadata: ["error": "\(error)"])
            jumps.restore([])
        }
    }

    /// The steps, kept for the next bgd; one the store does not take now is tried again at the
    /// next pass (it is not lost with this pass, nor does it stop it).
    private func saveSteps() async {
        do {
            try await store.setWallClockSteps(jumps.steps)
            jumps.markSaved(true)
        } catch {
            jumps.markSaved(false)
            logger.warning("Cannot save the wall clock's steps yet", metadata: ["error": "\(error)"])
        }
    }

    /// The wall clock was set forward by `jump`: the open events stamped before it (by the
    /// reading before the jump, whenever the carry is made) are moved on by as much, so that
    /// none expires, and no unclaimed download is removed, for days that did not pass. Before, a
    /// device that booted with its clock in the past and was set right by NTP lost them at the
    /// next pass. A jump while bgd was not running is not seen (nothing measured the time between).
    /// (While bgd runs, `StampAges` alone would keep them; the moved stamps outlast a restart.)
    private func carryForward(across jump: WallClockJumps.Jump) async throws {
        let moved = try await store.carryForwardSessionEvents(createdBy: jump.before, by: jump.seconds)
        logger.notice(
            "The wall clock was set forward: unacknowledged events keep the time they had",
            metadata: ["jump.seconds": "\(Int(jump.seconds))", "events": "\(moved)"])
    }

    /// Transfers paused with no progress for `retention.history` are cancelled: the app that
    /// paused one and threw its resume data away kept a row and a partial file for good, up to
    /// its limit of outstanding transfers, past which it could make no more.
    /// One that cannot be cancelled now is said, and the others are cancelled all the same.
    private func expireAbandonedPauses(ages: StampAges) async throws {
        guard let expirePaused else { return }
        var expired = 0
        var failure: (any Error)?
        for id in try await store.pausedTransfers(idleFor: configuration.retention.history, ages: ages) {
            do {
                if try await expirePaused(id) { expired += 1 }
            } catch where error is CancellationError || Task.isCancelled {
                throw CancellationError()
            } catch {
                failure = error
            }
        }
        if expired > 0 {
            logger.notice("Cancelled transfers paused and left too long", metadata: ["transfers": "\(expired)"])
        }
        if let failure { throw failure }
    }

    /// A transfer's events the app has not acknowledged in `retention.history` are closed as
    /// expired (the app was relaunched to take them all that time), and a finished download it
    /// never claimed is removed from its container: as on iOS, where the file at `location` is
    /// gone once the delegate returns, a download is the app's to move when it is told. The
    /// events commit closed first, and the files to remove are read back from the closed events
    /// at every pass: a crash between the two leaves the file until the next pass, never an
    /// open event that names a file that is gone.
    private func expireUnacknowledged(ages: StampAges) async throws {
        let expired = try await store.expireSessionEvents(olderThan: configuration.retention.history, ages: ages)
        var removed: [AppID: Int] = [:]
        for download in try await store.expiredDownloads()
        where (download.location as NSString).lastPathComponent.hasPrefix("\(download.transfer.rawValue)-") {
            // Only the name bgd gave it; gone already (removed at an earlier pass) is no error.
            if SafeFiles.remove(download.location) { removed[download.app, default: 0] += 1 }
        }
        let apps = Set(expired.map(\.app)).union(removed.keys).sorted { $0.rawValue < $1.rawValue }
        for app in apps {
            activity?.emit(
                .eventsExpired(
                    app, events: expired.filter { $0.app == app }.count, downloadsRemoved: removed[app] ?? 0))
            logger.warning(
                "Expired transfer events the app never acknowledged (does its handler end before acknowledging?)",
                metadata: [
                    "app": "\(app)", "events": "\(expired.filter { $0.app == app }.count)",
                    "downloads.removed": "\(removed[app] ?? 0)",
                    "unacknowledged.for": "\(configuration.retention.history)",
                ])
        }
        // After the report: the events are closed whatever the count's read does, and a read
        // that fails leaves the run to its budget, as before, without losing the report.
        guard let eventsExpired else { return }
        for app in Set(expired.map(\.app)).sorted(by: { $0.rawValue < $1.rawValue }) {
            if let open = try? await store.openEventCount(for: app) { await eventsExpired(app, open) }
        }
    }
}
