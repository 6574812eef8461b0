import BackgroundModel
import BackgroundStore
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
    let logger: Logger

    public init(
        store: BackgroundStore, configuration: Configuration, clock: any WallClock, doorbell: Doorbell = Doorbell(),
        activity: ActivityFeed? = nil, logger: Logger
    ) {
        self.activity = activity
        self.store = store
        self.configuration = configuration
        self.clock = clock
        self.doorbell = doorbell
        self.logger = logger
    }

    public func run() async throws {
        await doorbell.serve("retention", on: clock, logger: logger) {
            let report = try await store.prune(configuration.retention, now: clock.now)
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
            return clock.now.adding(configuration.interval)
        }
    }
}
