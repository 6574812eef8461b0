import BackgroundModel
import Foundation
import Synchronization

/// Something the daemon did. Tests wait on these instead of sleeping; the dashboard's recent
/// activity and the metrics are made from them.
public enum Activity: Hashable, Sendable {
    case appRegistered(AppID)
    case appUnregistered(AppID)
    case appConnected(AppID)
    case appDisconnected(AppID)
    case runStarted(RunRecord)
    case runEnded(RunRecord)
    /// The app was told its run's budget is about to end.
    case expirationWarned(AppID, RunID)
    case processLaunched(AppID, processID: Int32)
    case processExited(AppID, processID: Int32, status: ExitStatus)
    /// The scheduler planned: what it launched and when it will look again.
    case planned(launched: [AppID], nextEvaluation: Date?)
    /// A transfer attempt began (its attempt count is committed).
    case transferAttemptStarted(TransferID)
    /// An attempt's body is written from `from` (what earlier attempts, or an earlier bgd,
    /// received; 0 when sent whole): bytes below it were not received now.
    case transferReceiving(TransferID, from: Int64)
    /// Bytes up to `bytes` are synced and committed.
    case transferCheckpointed(TransferID, bytes: Int64)
    case transferRetryScheduled(TransferID, at: Date, reason: String)
    /// A transfer now waits for the conditions to allow it (a network, power, an unmetered
    /// network), for `reason`; emitted when the reason is first committed, not on every pass.
    case transferHeld(TransferID, reason: String)
    /// A transfer was paused (by its app or the operator): it moves no more until resumed.
    case transferPaused(TransferRecord)
    /// A transfer ended; its events (for an app's) are committed.
    case transferEnded(TransferRecord)
    /// The push dispatcher decided about a waiting push.
    case pushHandled(AppID, PushID, PushDispatch)
    /// The app's lifecycle changed (reported by it, or bgd suspended, resumed or ended it).
    case lifecycleChanged(AppID, ApplicationState, DecisionReason?)
    case backgroundTaskBegun(AppID, BackgroundTaskIdentifier)
    case backgroundTaskEnded(AppID, BackgroundTaskIdentifier)
    /// The app was told to run its expiration handlers: its background time ends at the date.
    case backgroundTimeExpiring(AppID, Date)
    /// A pruning pass closed `events` of the app's transfer events as expired (unacknowledged
    /// for `--keep-history`) and removed `downloadsRemoved` downloads it never claimed.
    case eventsExpired(AppID, events: Int, downloadsRemoved: Int)
    /// A pruning pass ended, having deleted this many rows of finished history.
    case historyPruned(rows: Int)
}

/// Fans activity out to any number of subscribers. Subscribers that stop listening are dropped.
public final class ActivityFeed: Sendable {
    private let subscribers = Mutex<[UUID: AsyncStream<Activity>.Continuation]>([:])

    public init() {}

    public func emit(_ activity: Activity) {
        let continuations = subscribers.withLock { Array($0.values) }
        for continuation in continuations { continuation.yield(activity) }
    }

    /// How many listen now (each dashboard tab, each long-poll, the metrics, …).
    public var subscriberCount: Int { subscribers.withLock { $0.count } }

    /// A stream of everything emitted from now on.
    public func subscribe() -> AsyncStream<Activity> { subscription().stream }

    /// A stream of everything emitted from now on, and what ends it from outside (a long-lived
    /// reader whose loop must end when bgd stops: the dashboard's server-sent events).
    public func subscription() -> (stream: AsyncStream<Activity>, end: @Sendable () -> Void) {
        let (stream, continuation) = AsyncStream<Activity>.makeStream(bufferingPolicy: .bufferingNewest(10_000))
        let id = UUID()
        subscribers.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.removeValue(forKey: id) }
        }
        return (stream, { continuation.finish() })
    }
}

/// What the push dispatcher did with a waiting push (a metric's bounded label).
public enum PushDispatch: String, Sendable {
    /// Its run started.
    case delivered
    /// The throttle holds it until later.
    case held
    /// Expired or given up.
    case dropped
    /// The app has a run in flight; it goes when that ends.
    case waiting
}
