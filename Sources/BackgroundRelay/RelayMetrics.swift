import Foundation
import Synchronization

/// What `GET /metrics` shows of a relay node: connected devices, pushes by outcome and status,
/// the queue's depth, and how long pushes took from the provider's 200 to the device's ack.
public final class RelayMetrics: Sendable {
    /// Upper bounds of the delivery-latency buckets, in seconds.
    static let latencyBuckets: [Double] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 60]

    private struct State {
        var enrolled = 0
        var connects = 0
        var answers: [Int: Int] = [:]
        var latencyCounts = Array(repeating: 0, count: RelayMetrics.latencyBuckets.count)
        var latencySum = 0.0
        var latencyCount = 0
        var pruned = RelayPruneReport()
        var enrollmentsRefused: [String: Int] = [:]
        var silentClosed = 0
        var stalledCut = 0
    }
    private let state = Mutex(State())

    public init() {}

    func enrolled() { state.withLock { $0.enrolled += 1 } }
    func enrollmentRefused(_ code: String) { state.withLock { $0.enrollmentsRefused[code, default: 0] += 1 } }
    func connected(_ device: String) { state.withLock { $0.connects += 1 } }
    func disconnected(_ device: String) {}
    func closedSilent(_ count: Int) { state.withLock { $0.silentClosed += count } }
    func cutStalled() { state.withLock { $0.stalledCut += 1 } }
    func pruned(_ report: RelayPruneReport) {
        state.withLock {
            $0.pruned.expired += report.expired
            $0.pruned.replaced += report.replaced
            $0.pruned.deleted += report.deleted
            $0.pruned.tokensForgotten += report.tokensForgotten
            $0.pruned.devicesForgotten += report.devicesForgotten
        }
    }
    func answered(status: Int) { state.withLock { $0.answers[status, default: 0] += 1 } }

    func delivered(latency seconds: Double) {
        state.withLock { state in
            for (i, bound) in Self.latencyBuckets.enumerated() where seconds <= bound { state.latencyCounts[i] += 1 }
            state.latencySum += seconds
            state.latencyCount += 1
        }
    }

    /// The Prometheus text exposition.
    func exposition(store: any RelayStore, hub: DeviceHub) async -> String {
        let counts = (try? await store.pushCounts()) ?? [:]
        let snapshot = state.withLock { $0 }
        var text = """
            # HELP bgrelay_connected_devices Devices with an uplink open to this node.
            # TYPE bgrelay_connected_devices gauge
            bgrelay_connected_devices \(hub.connectedCount)
            # HELP bgrelay_uplink_connections_total Uplinks opened to this node.
            # TYPE bgrelay_uplink_connections_total counter
            bgrelay_uplink_connections_total \(snapshot.connects)
            # HELP bgrelay_uplinks_closed_silent_total Uplinks this node closed because their device sent nothing, not even a keep-alive, for --uplink-silence (gone without closing: wiped, its network dropped).
            # TYPE bgrelay_uplinks_closed_silent_total counter
            bgrelay_uplinks_closed_silent_total \(snapshot.silentClosed)
            # HELP bgrelay_uplinks_cut_stalled_total Uplinks this node cut because a write to their device waited --uplink-silence (the device reads nothing).
            # TYPE bgrelay_uplinks_cut_stalled_total counter
            bgrelay_uplinks_cut_stalled_total \(snapshot.stalledCut)
            # HELP bgrelay_enrollments_total Devices enrolled through this node.
            # TYPE bgrelay_enrollments_total counter
            bgrelay_enrollments_total \(snapshot.enrolled)
            # HELP bgrelay_enrollments_refused_total Enrollments this node refused, by why.
            # TYPE bgrelay_enrollments_refused_total counter
            bgrelay_enrollments_refused_total{reason="enrollmentTokenRequired"} \(snapshot.enrollmentsRefused["enrollmentTokenRequired"] ?? 0)
            bgrelay_enrollments_refused_total{reason="enrollmentTokenInvalid"} \(snapshot.enrollmentsRefused["enrollmentTokenInvalid"] ?? 0)
            bgrelay_enrollments_refused_total{reason="tooManyEnrollments"} \(snapshot.enrollmentsRefused["tooManyEnrollments"] ?? 0)
            # HELP bgrelay_queue_depth Pushes accepted and not yet acknowledged or ended.
            # TYPE bgrelay_queue_depth gauge
            bgrelay_queue_depth \(counts[.pending] ?? 0)
            # HELP bgrelay_pruned_pushes_total Pushes this node's pruner ended as expired (pending past their expiration or the hold), as replaced (a token's beyond its newest 1,000 pending) or deleted (ended past the retention).
            # TYPE bgrelay_pruned_pushes_total counter
            bgrelay_pruned_pushes_total{action="expired"} \(snapshot.pruned.expired)
            bgrelay_pruned_pushes_total{action="replaced"} \(snapshot.pruned.replaced)
            bgrelay_pruned_pushes_total{action="deleted"} \(snapshot.pruned.deleted)
            # HELP bgrelay_forgotten_tokens_total Device tokens this node's pruner forgot, revoked longer than the retention ago.
            # TYPE bgrelay_forgotten_tokens_total counter
            bgrelay_forgotten_tokens_total \(snapshot.pruned.tokensForgotten)
            # HELP bgrelay_forgotten_devices_total Devices this node's pruner forgot: enrolled longer than --hold-pushes ago, never connected, holding no token and no push.
            # TYPE bgrelay_forgotten_devices_total counter
            bgrelay_forgotten_devices_total \(snapshot.pruned.devicesForgotten)
            # HELP bgrelay_pushes Pushes in the store by outcome (ended ones until the pruner deletes them).
            # TYPE bgrelay_pushes gauge

            """
        for state in RelayPushState.allCases {
            text += "bgrelay_pushes{outcome=\"\(state.rawValue)\"} \(counts[state] ?? 0)\n"
        }
        text += "# HELP bgrelay_provider_requests_total Provider requests by HTTP status.\n"
        text += "# TYPE bgrelay_provider_requests_total counter\n"
        for (status, count) in snapshot.answers.sorted(by: { $0.key < $1.key }) {
            text += "bgrelay_provider_requests_total{status=\"\(status)\"} \(count)\n"
        }
        text += "# HELP bgrelay_delivery_seconds From the provider's 200 to the device's acknowledgement.\n"
        text += "# TYPE bgrelay_delivery_seconds histogram\n"
        for (bound, count) in zip(Self.latencyBuckets, snapshot.latencyCounts) {
            text += "bgrelay_delivery_seconds_bucket{le=\"\(bound)\"} \(count)\n"
        }
        text += "bgrelay_delivery_seconds_bucket{le=\"+Inf\"} \(snapshot.latencyCount)\n"
        text += "bgrelay_delivery_seconds_sum \(snapshot.latencySum)\n"
        text += "bgrelay_delivery_seconds_count \(snapshot.latencyCount)\n"
        return text
    }
}
