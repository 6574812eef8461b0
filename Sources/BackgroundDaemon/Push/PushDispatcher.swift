import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Logging
import ServiceLifecycle

/// Turns queued background pushes into wakes: coalesces each app's waiting pushes to the newest
/// (per collapse id), asks `PushThrottle` whether the app may be woken now, drops expired ones
/// with a reason, and starts a push run through the same path as a fetch.
///
/// The throttle's allowances are kept in memory: after a restart every app starts with a full
/// burst, which can only wake an app sooner, never lose a push (the queue is in the store).
actor PushDispatcher: Service {
    private let store: BackgroundStore
    private let coordinator: RunCoordinator
    private let throttle: PushThrottle
    private let clock: any WallClock
    private let doorbell: Doorbell
    private let activity: ActivityFeed
    private let logger: Logger
    private var allowances: [AppID: PushThrottle.Allowance] = [:]

    init(
        store: BackgroundStore, coordinator: RunCoordinator, throttle: PushThrottle, clock: any WallClock, doorbell: Doorbell,
        activity: ActivityFeed, logger: Logger
    ) {
        self.activity = activity
        self.store = store
        self.coordinator = coordinator
        self.throttle = throttle
        self.clock = clock
        self.doorbell = doorbell
        self.logger = logger
    }

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                while !Task.isCancelled {
                    let next = try await self.dispatch()
                    try await self.doorbell.wait(until: next, on: self.clock)
                }
            }
        } catch {}
    }

    /// One pass over the apps with waiting pushes; returns when to look again.
    private func dispatch() async throws -> Date? {
        let now = clock.now
        var next: Date?
        for app in try await store.appsWithQueuedPushes() {
            // Until the app's newest waiting push is held or sent: an expired one makes way for the next.
            while let push = try await store.coalesceQueuedPushes(of: app) {
                switch throttle.decide(expiration: push.expiration, allowance: allowances[app], now: now) {
                case .expired:
                    try await store.dropPush(push.id, reason: "expired: apns-expiration passed before the app could be woken")
                    activity.emit(.pushHandled(app, push.id, "dropped"))
                    continue
                case .hold(let until, let allowance):
                    allowances[app] = allowance
                    next = min(next ?? until, until)
                    activity.emit(.pushHandled(app, push.id, "held"))
                case .wakeNow(let allowance):
                    let reason = DecisionReason(
                        .pushWake,
                        "background push \(push.apnsID) (\(String(format: "%.1f", allowance.tokens)) more wakes allowed now; \(throttle.wakesPerHour) an hour)")
                    do {
                        _ = try await coordinator.startPush(
                            for: app, push: push.id, payload: String(decoding: push.payload, as: UTF8.self), reasons: [reason])
                        allowances[app] = allowance
                        activity.emit(.pushHandled(app, push.id, "delivered"))
                    } catch StoreError.runAlreadyInFlight {
                        // A fetch or an earlier push is running: again when it ends (the coordinator rings us).
                        activity.emit(.pushHandled(app, push.id, "waiting for the app's run to end"))
                    }
                }
                break
            }
        }
        return next
    }
}
