import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundTesting

/// Opens every event stream an app may hold (`EventBroker.maximumStreamsPerApp`), each past its
/// `hello`. Keep what it returns for as long as they are to stay open: a stream's reader, once
/// dropped, closes its connection.
func holdEveryStream(ofAppWithToken token: String, on daemon: TestDaemon) async throws -> [StreamMessages.Iterator] {
    let client = DaemonClient(socketPath: daemon.socketPath, token: token)
    var streams: [StreamMessages.Iterator] = []
    for _ in 0..<EventBroker.maximumStreamsPerApp {
        var messages = try await client.stream("/v1/app/events").makeAsyncIterator()
        _ = try await messages.next()  // hello: it is open
        streams.append(messages)
    }
    return streams
}
