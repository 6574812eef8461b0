import BackgroundModel
import BackgroundTesting
import HTTPTypes
import Hummingbird
import NIOCore
import Testing

@testable import BackgroundDaemon

/// An app's event stream gives its slot back even when its response is never sent: the server
/// writes the head first, and an app whose socket closed by then never gets the body.
@Suite(.timeLimit(.minutes(2)))
struct EventStreamLeaseTests {
    @Test func aStreamWhoseResponseIsDroppedUnsentFreesItsSlot() async throws {
        try await TestDaemon.with { daemon in
            let app = try await daemon.register("com.example.dropped", command: ["/bin/false"], interval: .never).app.id
            let events = daemon.daemon.appEvents
            let bearer = TokenIssuer.Bearer(app: app, launchedForRun: nil, owner: .runningApp)
            let request = Request(
                head: HTTPRequest(method: .get, scheme: nil, authority: nil, path: "/v1/app/events"),
                body: RequestBody(buffer: ByteBuffer()))
            // More than an app may hold at once, each dropped before its body runs.
            for _ in 0...EventBroker.maximumStreamsPerApp {
                var response: Response? = try await EventStream(events: events, bearer: bearer).response(for: request)
                #expect(events.broker.isConnected(app))
                response = nil
                _ = response
                #expect(!events.broker.isConnected(app), "the dropped stream let go of its slot")
            }
        }
    }
}
