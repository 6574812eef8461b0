import BackgroundModel
import Foundation
import Testing

@testable import BackgroundDaemon

/// A stream whose app does not read keeps a bounded buffer of signals; what it must not lose
/// survives the buffer's overflow and goes with the next signal it reads.
struct EventBrokerTests {
    static let app = AppID(rawValue: "com.example.slow")!

    /// A download's progress floods a stream that is not read: its events' nudge and its `exit`
    /// still reach it, before the progress that came after them, and only the newest progress is
    /// kept.
    @Test func newsOutlivesAFloodOfProgress() async throws {
        let broker = EventBroker()
        let subscription = try #require(broker.subscribe(Self.app, isLaunched: true))
        let transfer = TransferID(rawValue: 1)
        func progress(_ bytes: Int64) -> ControlMessage {
            .transferProgress(transfer: transfer, session: "s", bytesTransferred: bytes, bytesExpected: nil)
        }
        broker.eventsAvailable(for: Self.app)
        broker.send(.exit, to: Self.app)
        let flood = EventBroker.signalBuffer * 2
        for bytes in 1...flood { broker.send(progress(Int64(bytes)), to: Self.app) }
        broker.unsubscribe(subscription)

        var deliveries: [EventBroker.Delivery] = []
        for await delivery in subscription.deliveries { deliveries.append(delivery) }
        #expect(deliveries.prefix(2) == [.openEvents, .control(.exit)], "\(deliveries.prefix(3))")
        #expect(deliveries.count == 2 + EventBroker.signalBuffer, "the buffer holds the newest progress")
        #expect(deliveries.last == .control(progress(Int64(flood))))
    }

    /// A nudge read once is not read again; news after it is.
    @Test func newsIsTakenOnce() async throws {
        let broker = EventBroker()
        let subscription = try #require(broker.subscribe(Self.app, isLaunched: false))
        var deliveries = subscription.deliveries.makeAsyncIterator()
        broker.eventsAvailable(for: Self.app)
        broker.eventsAvailable(for: Self.app)
        broker.keepAlive()
        #expect(await deliveries.next() == .openEvents)
        #expect(await deliveries.next() == .keepAlive, "the second nudge's news went with the first")
        broker.send(.exit, to: Self.app)  // to launched processes only: not this one
        broker.send(.backgroundTimeExpiring(deadline: Date(timeIntervalSince1970: 0)), to: Self.app)
        #expect(await deliveries.next() == .control(.backgroundTimeExpiring(deadline: Date(timeIntervalSince1970: 0))))
    }
}
