import BackgroundModel
import Foundation
import Testing

@testable import BackgroundDaemon

/// What a stream is sent, when its app reads slower than news comes: nothing it must have is
/// lost, the order holds, and what waits stays bounded.
struct EventBrokerTests {
    static let app = AppID(rawValue: "com.example.slow")!
    static let transfer = TransferID(rawValue: 1)

    static func progress(_ bytes: Int64, of transfer: TransferID = transfer) -> ControlMessage {
        .transferProgress(transfer: transfer, session: "s", bytesTransferred: bytes, bytesExpected: nil)
    }

    func deliveries(
        of subscription: EventBroker.Subscription, after broker: EventBroker
    ) async -> [EventBroker.Delivery] {
        broker.unsubscribe(subscription)
        var all: [EventBroker.Delivery] = []
        for await delivery in subscription.deliveries { all.append(delivery) }
        return all
    }

    /// A download's progress floods a stream that is not read: its events' nudge and its `exit`
    /// still reach it (before, 1,024 progress messages pushed them out of a bounded buffer), and
    /// of the progress only the latest waits.
    @Test func newsOutlivesAFloodOfProgress() async throws {
        let broker = EventBroker()
        let subscription = try #require(broker.subscribe(Self.app, owner: .launched(AppToken(rawValue: "launched"))))
        broker.eventsAvailable(for: Self.app)
        broker.send(.exit, to: Self.app)
        for bytes in 1...2048 { broker.send(Self.progress(Int64(bytes)), to: Self.app) }
        #expect(
            await deliveries(of: subscription, after: broker) == [
                .openEvents, .control(.exit), .control(Self.progress(2048)),
            ])
    }

    /// A download's last progress goes before the events nudged after it (its
    /// `downloadFinished`): an app's `didWriteData` never follows `didFinishDownloadingTo`.
    /// Events nudged before and after other news are read at both places.
    @Test func theOrderHolds() async throws {
        let broker = EventBroker()
        let subscription = try #require(broker.subscribe(Self.app, owner: .runningApp))
        broker.eventsAvailable(for: Self.app)
        broker.send(Self.progress(1), to: Self.app)
        broker.send(Self.progress(2), to: Self.app)
        broker.eventsAvailable(for: Self.app)
        broker.eventsAvailable(for: Self.app)
        broker.send(.exit, to: Self.app)  // to launched processes only: not this one
        let deadline = Date(timeIntervalSince1970: 0)
        broker.send(.backgroundTimeExpiring(deadline: deadline), to: Self.app)
        broker.keepAlive()
        #expect(
            await deliveries(of: subscription, after: broker) == [
                .openEvents, .control(Self.progress(2)), .openEvents,
                .control(.backgroundTimeExpiring(deadline: deadline)), .keepAlive,
            ])
    }

    /// A newer state or warning stands after what came before it: the app is not left with an
    /// older lifecycle message read after a newer warning.
    @Test func theNewestStateComesLast() async throws {
        let broker = EventBroker()
        let subscription = try #require(broker.subscribe(Self.app, owner: .runningApp))
        let (d1, d2, d3) = (
            Date(timeIntervalSince1970: 1), Date(timeIntervalSince1970: 2), Date(timeIntervalSince1970: 3)
        )
        broker.send(.backgroundTimeExpiring(deadline: d1), to: Self.app)
        broker.send(.lifecycle(state: .background, deadline: d2), to: Self.app)
        broker.send(.backgroundTimeExpiring(deadline: d3), to: Self.app)
        #expect(
            await deliveries(of: subscription, after: broker) == [
                .control(.lifecycle(state: .background, deadline: d2)), .control(.backgroundTimeExpiring(deadline: d3)),
            ])
    }

    /// Events and state changes taking turns on a stream that does not read leave one of each
    /// waiting, not a nudge per turn.
    @Test func alternatingNewsStaysBounded() async throws {
        let broker = EventBroker()
        let subscription = try #require(broker.subscribe(Self.app, owner: .runningApp))
        for second in 1...1000 {
            broker.eventsAvailable(for: Self.app)
            broker.send(
                .lifecycle(state: .background, deadline: Date(timeIntervalSince1970: Double(second))), to: Self.app)
        }
        #expect(
            await deliveries(of: subscription, after: broker) == [
                .openEvents, .control(.lifecycle(state: .background, deadline: Date(timeIntervalSince1970: 1000))),
            ])
    }

    /// News read is gone; news after it is read next.
    @Test func newsIsTakenOnce() async throws {
        let broker = EventBroker()
        let subscription = try #require(broker.subscribe(Self.app, owner: .runningApp))
        var deliveries = subscription.deliveries.makeAsyncIterator()
        broker.eventsAvailable(for: Self.app)
        #expect(await deliveries.next() == .openEvents)
        broker.keepAlive()
        #expect(await deliveries.next() == .keepAlive)
        broker.send(Self.progress(5, of: TransferID(rawValue: 2)), to: Self.app)
        #expect(await deliveries.next() == .control(Self.progress(5, of: TransferID(rawValue: 2))))
    }
}
