import BackgroundModel
import BackgroundStore
import Foundation

/// An app's outbox: what the stream sends, what the app acknowledges, what the operator reads.
/// An acknowledgement that empties the outbox ends a run launched only for those events.
struct AppEvents: Sendable {
    let store: BackgroundStore
    let apps: Apps
    let broker: EventBroker
    let coordinator: RunCoordinator
    let lifecycle: LifecycleSupervisor
    let activity: ActivityFeed
    let clock: any WallClock

    enum Refusal: Error, Equatable {
        /// The app acknowledged a sequence number bgd never sent it.
        case neverSent(EventSequence, last: EventSequence)
    }

    /// The app has handled every event up to `seq`.
    func acknowledge(upTo seq: EventSequence, only: Bool = false, for app: AppID) async throws {
        let last = try await store.lastEventSequence(for: app)
        guard seq.rawValue >= 1, seq <= last else { throw Refusal.neverSent(seq, last: last) }
        try await store.acknowledge(upTo: seq, only: only, for: app, now: clock.now)
        broker.acknowledged(upTo: seq, only: only, by: app)
        Failpoint.eventAfterAckCommit.hit()
        // Counted, not read: with thousands left open, reading them all made each ack cost 135 ms.
        // A count that fails to read leaves the run as it is (the next acknowledgement counts
        // again): the acknowledgement is committed, and an error would say it was not.
        guard let remaining = try? await store.openEventCounts(for: app) else { return }
        // The transfer events handled, the app may be suspended again, whatever run's event is
        // still open (its run's end says when that is done).
        if remaining.transfers == 0 { await lifecycle.workEnded(for: app, run: nil) }
        await coordinator.eventsAcknowledged(by: app, openRemaining: remaining.all)
    }

    /// The outbox as the operator sees it (`bgctl events`), newest first.
    func outbox(of id: AppID, limit: Int) async throws -> [OutboxEntry] {
        _ = try await apps.require(id)
        return try await store.outbox(for: id, limit: limit)
    }

    /// Events the app has not acknowledged, after `sequence`.
    func open(for app: AppID, after sequence: EventSequence?, limit: Int? = nil) async throws -> [AppEvent] {
        try await store.openEvents(for: app, after: sequence, limit: limit)
    }

    /// A stream opens: the app is connected from now until `disconnect`.
    func connect(_ caller: TokenIssuer.Bearer) async throws -> EventBroker.Subscription {
        _ = try await apps.require(caller.app)
        // Subscribed before the stream's first read of the store, so nothing committed in between is missed.
        guard let subscription = broker.subscribe(caller.app, owner: caller.owner) else {
            throw ServiceError.tooManyStreams(caller.app)
        }
        activity.emit(.appConnected(caller.app))
        if !caller.isLaunched { await coordinator.foregroundConnectionOpened(caller.app) }
        return subscription
    }

    /// A stream closed; a process that went away takes its background tasks with it.
    func disconnect(_ subscription: EventBroker.Subscription, of app: AppID) {
        broker.unsubscribe(subscription)
        activity.emit(.appDisconnected(app))
        if !subscription.isLaunched && !broker.isConnectedInForeground(app) {
            let coordinator = self.coordinator
            Task { await coordinator.foregroundConnectionClosed(app) }
        }
        if !broker.isConnected(app) {
            let lifecycle = self.lifecycle
            Task { await lifecycle.disconnected(app) }
        }
    }
}
