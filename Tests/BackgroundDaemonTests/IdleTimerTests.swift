import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// Idle is free (issue 17): a bgd with registered apps and nothing due has no timer of its own
/// that fires within ten minutes — no keep-alive without a stream, no polling loop.
@Suite(.timeLimit(.minutes(5)))
struct IdleTimerTests {
    @Test func anIdleBgdSleepsUntilItsNextDeadline() async throws {
        try await TestDaemon.with { daemon in
            for i in 0..<5 {
                try await daemon.register(
                    "com.example.idle\(i)", command: [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"],
                    interval: .never)
            }
            // Every service has gone round once and is waiting.
            try await daemon.waitUntil { daemon.clock.sleeperCount > 0 }
            let next = try #require(daemon.clock.nextDeadline)
            #expect(
                next.timeIntervalSince(daemon.clock.now) >= 600,
                "a timer \(next.timeIntervalSince(daemon.clock.now)) s away")
        }
    }
}
