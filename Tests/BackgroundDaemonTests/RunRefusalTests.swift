import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// A foreground app's `run()` ends only when bgd refuses it for good. bgd saying "not now" — a
/// 429 while the app's streams from before a drop are still counted, a 503 while its storage
/// fails — is tried again, as a dropped stream is.
@Suite(.timeLimit(.minutes(2)))
struct RunRefusalTests {
    @Test func runGoesOnThroughANotNowAndEndsAtARefusal() async throws {
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register("com.example.patient", command: ["/bin/false"], interval: .never)
            // The app's share of streams, all taken: its run is answered 429 tooManyStreams.
            var streams = try await holdEveryStream(ofAppWithToken: registered.token, on: daemon)
            let app = BackgroundApplication(
                appID: registered.app.id, token: registered.token, socketPath: daemon.socketPath, clock: daemon.clock)
            let calls = Counter()
            app.onBackgroundFetch {
                calls.increment()
                return .newData
            }
            func isConnected() async throws -> Bool {
                try await daemon.admin.send(.get, "/v1/apps", as: [AppSummary].self).first?.isConnected == true
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                let sleepers = daemon.clock.sleeperCount
                group.addTask { try await app.run() }
                // Refused, it waits on its clock to try again; bgd's clock has not moved, so it has not.
                #expect(await eventually { daemon.clock.sleeperCount > sleepers }, "run() is pausing")
                streams.removeAll()
                #expect(try await eventuallyAsync { try await !isConnected() })
                #expect(
                    try await eventuallyAsync {
                        daemon.clock.advance(by: .seconds(5))
                        return try await isConnected()
                    }, "run() tried again and connected")
                let run = try await daemon.waitForRunEnd(of: "com.example.patient") {
                    _ = try await daemon.admin.send(.post, "/v1/apps/com.example.patient/fetch", as: RunRecord.self)
                }
                #expect(run.outcome == .newData && calls.value == 1)
                group.cancelAll()
            }

            // A token bgd does not know is refused for good: run() says so at once.
            let stranger = BackgroundApplication(
                appID: registered.app.id, token: String(repeating: "0", count: 64), socketPath: daemon.socketPath,
                clock: daemon.clock)
            do {
                try await stranger.run()
                Issue.record("run() with a token bgd does not know returned")
            } catch let error as BackgroundError {
                #expect(error.isLastingRefusal && error.httpStatus == 401, "\(error)")
            }
        }
    }
}
