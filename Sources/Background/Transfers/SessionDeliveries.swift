import BackgroundModel
import Synchronization

/// One connection's transfer events, handed to their sessions: in order within each session,
/// one at a time, each acknowledged as it is handled — and each session on its own, beside the
/// event stream. A session's events wait for the app to create the session (as on iOS, where it
/// recreates it in `handleEventsForBackgroundURLSession`); before, that wait sat in the stream's
/// loop, and an app that created a session only later (or had renamed it) handled no fetch, push
/// or expiration again, and could not even be cancelled.
final class SessionDeliveries: Sendable {
    private struct Delivery {
        var events: AsyncStream<AppEvent>.Continuation
        var task: Task<Void, Never>
    }
    private let application: BackgroundApplication
    private let deliveries = Mutex<[String: Delivery]?>([:])

    init(application: BackgroundApplication) {
        self.application = application
    }

    /// Whether `session` has events queued (the next must queue behind them).
    func isQueuing(_ session: String) -> Bool { deliveries.withLock { $0?[session] != nil } }

    /// Queues `event` for `session`, starting its delivery at the first. Ignored once stopped.
    func enqueue(_ event: AppEvent, session: String) {
        deliveries.withLock { deliveries in
            guard deliveries != nil else { return }
            if let delivery = deliveries?[session] {
                delivery.events.yield(event)
                return
            }
            let (events, continuation) = AsyncStream.makeStream(of: AppEvent.self)
            continuation.yield(event)
            let application = application
            let task = Task {
                for await event in events {
                    guard await application.handOver(event, session: session) else { return }
                    await application.finish(event.seq)
                }
            }
            deliveries?[session] = Delivery(events: continuation, task: task)
        }
    }

    /// Takes no more events and returns once every session's delivery has ended: a session the
    /// app has created gets the events queued for it (acknowledged, as bgd's `exit` expects); one
    /// it has not stops waiting, and its events are left for bgd to send again.
    func stop() async {
        let stopped = deliveries.withLock { deliveries in
            defer { deliveries = nil }
            return deliveries ?? [:]
        }
        for (session, delivery) in stopped {
            delivery.events.finish()
            if application.sessions.existing(session) == nil { delivery.task.cancel() }
        }
        for delivery in stopped.values { await delivery.task.value }
    }
}
