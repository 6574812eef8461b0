import BackgroundModel
import BackgroundStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore
import ServiceLifecycle
import Synchronization

/// One app's live event stream: newline-delimited JSON on one long response.
///
/// On open it sends `hello`, then every event the app has not acknowledged (in order), then
/// whatever comes while it stays connected. Events are read from the store, never from memory,
/// so a reconnect after any crash sees exactly the open events again.
struct EventStream {
    let events: AppEvents
    let bearer: TokenIssuer.Bearer
    /// How many open events one read of the store takes.
    static let page = 64

    func response(for request: Request) async throws -> Response {
        let subscription = try await events.connect(bearer)
        // Ended once, whichever comes first: the body returns, or the response is dropped before
        // its body ever runs — the server writes the head first, and an app whose socket closed
        // by then never gets a body. Before, such a stream kept its slot (four and the app was
        // refused `tooManyStreams` until bgd restarted) and counted as connected.
        let lease = StreamLease(subscription: subscription, app: bearer.app, events: events)
        var headers = HTTPFields()
        headers[.contentType] = "application/x-ndjson"
        headers[.cacheControl] = "no-store"
        let events = self.events
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                defer { lease.end() }
                do {
                    // A stream never ends by itself: on a graceful shutdown, end it, so the server
                    // does not wait on it forever. The app reconnects to the next bgd.
                    try await withGracefulShutdownHandler {
                        try await request.body.consumeWithCancellationOnInboundClose { _ in
                            try await stream(subscription, to: &writer)
                        }
                    } onGracefulShutdown: {
                        events.broker.unsubscribe(subscription)
                    }
                } catch is CancellationError {
                    return  // the app went away
                }
                try await writer.finish(nil)
            })
    }

    private func stream(_ subscription: EventBroker.Subscription, to writer: inout any ResponseBodyWriter) async throws
    {
        let encoder = WireCoding.makeEncoder()
        func send(_ message: StreamMessage) async throws {
            var line = try encoder.encode(message)
            line.append(UInt8(ascii: "\n"))
            try await writer.write(ByteBuffer(bytes: line))
        }
        try await send(.hello(app: bearer.app, launchedForRun: bearer.launchedForRun))
        // Read up to here; the first event since passed over (held by another stream, or not
        // this one's yet), from which a rewind reads again.
        var readTo: EventSequence?
        var firstPassedOver: EventSequence?
        // A page at a time: a peer that stops reading holds one page, not its whole backlog
        // (an app may leave 10,000 events open, and 300 stalled streams held 1.9 GB).
        func sendOpenEvents() async throws {
            if subscription.news.takeRewind(), let first = firstPassedOver {
                readTo = EventSequence(rawValue: first.rawValue - 1)
                firstPassedOver = nil
            }
            while true {
                let page = try await events.open(for: bearer.app, after: readTo, limit: Self.page)
                for (event, verdict) in zip(page, events.broker.take(page, by: subscription)) {
                    switch verdict {
                    case .send: try await send(.event(event))
                    case .sentAlready: break
                    case .passedOver: firstPassedOver = firstPassedOver ?? event.seq
                    }
                    readTo = event.seq
                }
                if page.count < Self.page { return }
            }
        }
        try await sendOpenEvents()
        for await delivery in subscription.deliveries {
            switch delivery {
            case .openEvents: try await sendOpenEvents()
            case .control(let message): try await send(.control(message))
            case .keepAlive: try await send(.hello(app: bearer.app, launchedForRun: bearer.launchedForRun))
            }
        }
    }
}

/// An app's hold on its event stream, let go of exactly once: by the stream's body when it ends,
/// or when the response holding it goes away unsent.
final class StreamLease: Sendable {
    let subscription: EventBroker.Subscription
    let app: AppID
    let events: AppEvents
    private let ended = Atomic<Bool>(false)

    init(subscription: EventBroker.Subscription, app: AppID, events: AppEvents) {
        self.subscription = subscription
        self.app = app
        self.events = events
    }

    func end() {
        guard !ended.exchange(true, ordering: .acquiringAndReleasing) else { return }
        events.disconnect(subscription, of: app)
    }

    deinit { end() }
}
