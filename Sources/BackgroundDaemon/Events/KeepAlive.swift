import BackgroundModel
import Foundation
import ServiceLifecycle

/// Sends a line on every idle event stream at a fixed period. HTTP clients give up on a silent
/// connection (AsyncHTTPClient's default read timeout is 90 s), and a line written to a peer
/// that has gone away is how bgd notices it.
struct KeepAlive: Service {
    let broker: EventBroker
    let clock: any WallClock
    var period: Duration = .seconds(30)

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                while true {
                    try await clock.sleep(until: clock.now.adding(period))
                    broker.keepAlive()
                }
            }
        } catch is CancellationError {}
    }
}
