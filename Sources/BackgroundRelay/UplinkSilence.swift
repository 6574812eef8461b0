import BackgroundModel
import Logging
import ServiceLifecycle

/// Closes the uplinks whose devices went silent. bgd sends a keep-alive every few minutes
/// (`--push-relay-keep-alive`, 270 s by default); a device that sends nothing at all for
/// `limit` is gone without having closed — wiped, switched off, its NAT mapping dropped — and
/// its connection would otherwise hold a slot of `--max-devices` for good, and keep the device
/// "seen", so never forgotten. Such a session is told `closing silent` and ends.
///
/// One task for every device: every half of `limit` (on time that passes, not the wall clock),
/// each session is asked whether its device sent a line since the last look; the second look in
/// a row to find none ends it — between `limit` and 1½ × `limit` of silence. Looking every
/// quarter cost an idle relay 0.27 wakeups a minute; every half, 0.13.
struct UplinkSilence: Service {
    let limit: Duration
    let hub: DeviceHub
    let metrics: RelayMetrics
    let clock: any WallClock
    let logger: Logger

    static let sweeps = 2

    func run() async throws {
        try? await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                try await clock.sleep(for: limit / Self.sweeps)
                let silent = hub.sweepSilent(limit: Self.sweeps)
                guard !silent.isEmpty else { continue }
                metrics.closedSilent(silent.count)
                for device in silent {
                    logger.info(
                        "Closing a silent uplink", metadata: ["device": "\(device)", "silent.for": "\(limit)"])
                }
            }
        }
    }
}
