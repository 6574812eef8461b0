import BackgroundModel
import Foundation
import Logging
import ServiceLifecycle

/// Keeps a relay's store bounded for months: once at start and then every `retention.interval`, pending
/// pushes that can no longer be delivered end as expired (a device that never comes back leaves
/// nothing pending for ever), pushes that ended longer than `keepEnded` ago are deleted, and
/// so are revoked tokens that old and devices enrolled `holdPending` ago that never connected;
/// a device not seen for `forgetDevices` is forgotten with its tokens.
/// Every node of a fleet runs one; passes on several nodes at once are harmless (each row is
/// ended or deleted once).
struct RelayPruner: Service {
    let store: any RelayStore
    let hub: DeviceHub
    let retention: Relay.Retention
    let metrics: RelayMetrics
    let clock: any WallClock
    let logger: Logger

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                do {
                    // The devices whose uplinks this node holds are not gone, however long ago
                    // they connected.
                    try await store.markSeen(hub.connectedDevices, now: clock.now)
                    let report = try await store.prune(
                        now: clock.now, holdFor: retention.holdPending.seconds, keepEnded: retention.keepEnded.seconds,
                        forgetAfter: retention.forgetDevices.seconds)
                    metrics.pruned(report)
                    if report != RelayPruneReport() {
                        logger.info(
                            "Pruned pushes",
                            metadata: [
                                "expired": "\(report.expired)", "replaced": "\(report.replaced)",
                                "deleted": "\(report.deleted)",
                                "tokens.forgotten": "\(report.tokensForgotten)",
                                "devices.forgotten": "\(report.devicesForgotten)",
                            ])
                    }
                } catch is CancellationError {
                    return
                } catch {
                    // The next pass tries again; nothing is lost by waiting.
                    logger.warning("Could not prune pushes", metadata: ["error": "\(error)"])
                }
                try await clock.sleep(until: clock.now.adding(retention.interval))
            }
        }
    }
}
