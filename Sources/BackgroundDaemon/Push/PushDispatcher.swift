import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Logging
import ServiceLifecycle

/// Turns queued background pushes into wakes: coalesces each app's waiting pushes to the newest
/// (per collapse id), asks `PushThrottle` whether the app may be woken now, drops expired ones
/// with a reason, and starts a push run through the same path as a fetch. Every push's fate is
/// written to it with a reason code (`bgctl why`); each app's allowance is saved with the wake
/// that spends it, so a restart of bgd hands out no extra wakes.
actor PushDispatcher: Service {
    private let store: BackgroundStore
    private let coordinator: RunCoordinator
    private let throttle: PushThrottle
    private let clock: any WallClock
    private let doorbell: Doorbell
    private let activity: ActivityFeed
    private let logger: Logger

    init(
        store: BackgroundStore, coordinator: RunCoordinator, throttle: PushThrottle, clock: any WallClock,
        doorbell: Doorbell,
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
        await doorbell.serve("push dispatch", on: clock, logger: logger) { try await self.dispatch() }
    }

    /// One pass over the apps with waiting pushes; returns when to look again.
    private func dispatch() async throws -> Date? {
        let now = clock.now
        var next: Date?
        for app in try await store.appsWithQueuedPushes() {
            let allowance = try await store.pushAllowance(of: app)
            // Until the app's oldest waiting push is held or sent: an expired one makes way for the
            // next. Those behind it that would expire before their turn go with a reason.
            while let push = try await store.coalesceQueuedPushes(of: app) {
                func dropBehind(expiringBefore turn: Date, _ why: String) async throws {
                    let reason = DecisionReason(.pushExpired, "its apns-expiration came before its turn: \(why)")
                    for dropped in try await store.dropQueuedPushes(
                        of: app, expiringBefore: turn, behind: push.id, reason: reason)
                    {
                        activity.emit(.pushHandled(app, dropped, .dropped))
                    }
                }
                if let lapsed = PushThrottle.nowOrNeverLapsed(
                    expiration: push.expiration, receivedAt: push.receivedAt, now: now)
                {
                    try await store.dropPush(push.id, reason: lapsed)
                    activity.emit(.pushHandled(app, push.id, .dropped))
                    continue
                }
                switch throttle.decide(expiration: push.expiration, allowance: allowance, now: now) {
                case .expired(let reason):
                    try await store.dropPush(push.id, reason: reason)
                    activity.emit(.pushHandled(app, push.id, .dropped))
                    continue
                case .hold(let until, _, let reason):
                    try await store.notePushWaiting(push.id, reason: reason)
                    next = min(next ?? until, until)
                    activity.emit(.pushHandled(app, push.id, .held))
                    try await dropBehind(
                        expiringBefore: until,
                        "the app's next push wake is \(WireCoding.formatSeconds(until)), for an earlier push")
                case .wakeNow(let allowance, let reason):
                    do {
                        _ = try await coordinator.start(
                            .push(
                                push.id, apnsID: push.apnsID, payload: String(decoding: push.payload, as: UTF8.self),
                                allowance: allowance),
                            for: app, trigger: .remoteNotification,
                            reasons: [DecisionReason(.pushWake, "background push \(push.apnsID): \(reason.detail)")])
                        activity.emit(.pushHandled(app, push.id, .delivered))
                        try await dropBehind(expiringBefore: now, "the app was woken for an earlier push")
                    } catch StoreError.appNotFound {
                        // Unregistered since this pass read the apps (its pushes went with it):
                        // the apps after it are still served.
                        break
                    } catch StoreError.runAlreadyInFlight {
                        // A fetch or an earlier push is running: again when it ends (the coordinator
                        // rings us), unless it had to go now or never.
                        try await dropBehind(expiringBefore: now, "the app was running a fetch or an earlier push")
                        switch PushThrottle.whileAppRuns(expiration: push.expiration) {
                        case .waits(let reason):
                            try await store.notePushWaiting(push.id, reason: reason)
                            activity.emit(.pushHandled(app, push.id, .waiting))
                        case .expired(let reason):
                            try await store.dropPush(push.id, reason: reason)
                            activity.emit(.pushHandled(app, push.id, .dropped))
                        }
                    }
                }
                break
            }
        }
        return next
    }
}
