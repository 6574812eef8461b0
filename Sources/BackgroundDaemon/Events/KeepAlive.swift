import BackgroundModel
import Foundation
import ServiceLifecycle

/// Sends a line on every idle event stream at a fixed period. HTTP clients give up on a silent
/// connection (AsyncHTTPClient's default read timeout is 90 s), and a line written to a peer
/// that has gone away is how bgd notices it. With no stream open it does not wake at all: it
/// waits for the first one (an idle bgd costs nothing here).
struct KeepAlive: Service {
    let broker: EventBroker
    let clock: any WallClock
    var period: Duration = .seconds(30)

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                while true {
                    if !broker.hasStreams {
                        try await broker.streamOpened.wait(until: nil, on: clock)
                        continue
                    }
                    // On the time that really passes: a wall clock set back must not silence
                    // the streams (`WallClock.sleep(for:)`).
                    try await clock.sleep(for: period)
                    broker.keepAlive()
                }
            }
        } catch is CancellationError {}
    }
}
