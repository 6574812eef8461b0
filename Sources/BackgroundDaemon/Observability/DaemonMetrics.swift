import BackgroundModel
import BackgroundStore
import CoreMetrics
import Foundation
import Prometheus
import ServiceLifecycle
import Synchronization

/// bgd's metrics, through swift-metrics into a Prometheus registry of this daemon's own (so
/// daemons sharing a process — tests — do not share counts), exposed as `/metrics`.
///
/// Labels are bounded sets — trigger, outcome, reason code, state — never app ids: a metric per
/// app grows without limit with the apps registered.
public final class DaemonMetrics: Sendable {
    public let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory

    public init() {
        factory = PrometheusMetricsFactory(registry: registry)
    }

    func counter(_ name: String, _ labels: [(String, String)] = []) -> CoreMetrics.Counter {
        CoreMetrics.Counter(label: name, dimensions: labels, factory: factory)
    }

    func gauge(_ name: String) -> CoreMetrics.Gauge { CoreMetrics.Gauge(label: name, factory: factory) }

    func timer(_ name: String) -> CoreMetrics.Timer { CoreMetrics.Timer(label: name, factory: factory) }

    /// How late a scheduled wake started after the time the policy planned it for.
    func recordSchedulingLag(_ lag: Duration) {
        timer("bgd_scheduling_lag_seconds").recordNanoseconds(max(0, lag.nanoseconds))
    }

    /// One commit of the store.
    func recordCommit(_ duration: Duration) {
        timer("bgd_store_commit_seconds").recordNanoseconds(duration.nanoseconds)
    }

    /// The gateway's counters, one per status, made once: the gateway answers tens of thousands a second.
    private let pushRequests = Mutex<[Int: CoreMetrics.Counter]>([:])

    /// A provider's request at the push gateway, by status.
    func recordPushRequest(status: Int) {
        let requests = pushRequests.withLock { counters in
            if let known = counters[status] { return known }
            let made = self.counter("bgd_push_requests_total", [("status", "\(status)")])
            counters[status] = made
            return made
        }
        requests.increment()
    }

    /// The Prometheus text, with the gauges read from the store now.
    func exposition(store: BackgroundStore) async -> String {
        if let gauges = try? await store.gauges() {
            gauge("bgd_outbox_depth").record(gauges.openEvents)
            gauge("bgd_transfers_active").record(gauges.activeTransfers)
            gauge("bgd_pushes_queued").record(gauges.queuedPushes)
        }
        return registry.emitToString()
    }
}

extension Duration {
    var nanoseconds: Int64 {
        let (seconds, attoseconds) = components
        return seconds * 1_000_000_000 + attoseconds / 1_000_000_000
    }
}

/// Turns what the daemon does (its activity feed) into counters: runs by trigger, first reason
/// and outcome, budget expirations, pushes by outcome, transfer bytes, attempts and retries,
/// lifecycle transitions and background tasks.
struct MetricsRecorder: Service {
    let metrics: DaemonMetrics
    let activity: ActivityFeed

    func run() async throws {
        let feed = activity.subscribe()
        await cancelWhenGracefulShutdown {
            var bytesSeen: [TransferID: Int64] = [:]
            for await event in feed {
                switch event {
                case .runEnded(let run):
                    let outcome = run.outcome?.rawValue ?? "unknown"
                    let reason = run.reasons.first?.code.rawValue ?? "none"
                    metrics.counter(
                        "bgd_wakes_total", [("trigger", run.trigger.rawValue), ("reason", reason), ("result", outcome)]
                    ).increment()
                    if run.outcome == .expired { metrics.counter("bgd_budget_expirations_total").increment() }
                case .expirationWarned:
                    metrics.counter("bgd_expiration_warnings_total").increment()
                case .pushHandled(_, _, let outcome):
                    metrics.counter("bgd_pushes_total", [("outcome", outcome.rawValue)]).increment()
                case .transferAttemptStarted:
                    metrics.counter("bgd_transfer_attempts_total").increment()
                case .eventsExpired(_, let events, _):
                    metrics.counter("bgd_events_expired_total").increment(by: Int64(events))
                case .transferReceiving(let id, let from):
                    // Counted from here: what a resume starts from came in an earlier attempt,
                    // or before a restart, and was counted then (or by the bgd before).
                    bytesSeen[id] = from
                case .transferCheckpointed(let id, let bytes):
                    let delta = bytes - (bytesSeen[id] ?? 0)
                    bytesSeen[id] = bytes
                    if delta > 0 { metrics.counter("bgd_transfer_bytes_total").increment(by: delta) }
                case .transferRetryScheduled:
                    metrics.counter("bgd_transfer_retries_total").increment()
                case .transferEnded(let record):
                    bytesSeen[record.id] = nil
                    metrics.counter("bgd_transfers_ended_total", [("state", record.state.rawValue)]).increment()
                case .lifecycleChanged(_, let state, _):
                    metrics.counter("bgd_lifecycle_transitions_total", [("state", state.rawValue)]).increment()
                case .backgroundTaskBegun:
                    metrics.counter("bgd_background_tasks_total").increment()
                case .processLaunched:
                    metrics.counter("bgd_launches_total").increment()
                default:
                    continue
                }
            }
        }
    }
}
