import BackgroundModel
import Foundation
import Testing

@testable import BackgroundDaemon

/// What the activity feed turns into counters.
struct MetricsRecorderTests {
    /// A download resumed (after a restart of bgd, or a retry) counts only the bytes received
    /// now: its checkpoint's bytes were counted when they came. Before, its first checkpoint
    /// added all of them — a 900 MB spike in `rate()` for a 1 MB step. One a server sends whole
    /// again counts again, from zero.
    @Test func transferBytesCountWhatEachAttemptReceived() async throws {
        let metrics = DaemonMetrics()
        let activity = ActivityFeed()
        let recorder = Task { try await MetricsRecorder(metrics: metrics, activity: activity).run() }
        defer { recorder.cancel() }
        #expect(await eventually { activity.subscriberCount > 0 })
        let id = TransferID(7)
        let megabyte: Int64 = 1 << 20
        activity.emit(.transferAttemptStarted(id))
        activity.emit(.transferReceiving(id, from: 900 * megabyte))
        activity.emit(.transferCheckpointed(id, bytes: 901 * megabyte))
        activity.emit(.transferAttemptStarted(id))
        activity.emit(.transferReceiving(id, from: 0))
        activity.emit(.transferCheckpointed(id, bytes: 2 * megabyte))
        func counted() -> String {
            metrics.registry.emitToString().split(separator: "\n").first { $0.hasPrefix("bgd_transfer_bytes_total ") }
                .map(String.init) ?? ""
        }
        #expect(await eventually { counted() == "bgd_transfer_bytes_total \(3 * megabyte)" }, "\(counted())")
    }
}
