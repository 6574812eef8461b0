import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// bgd prunes finished history while it runs (`--keep-history`): on its own timer, and at once
/// when rung.
@Suite(.timeLimit(.minutes(5)))
struct HistoryPrunerTests {
    @Test func finishedRunsOlderThanTheHistoryAreDeletedWhileBgdRuns() async throws {
        let start = Date(timeIntervalSince1970: 1_767_571_200)
        try await TestDaemon.with(
            clock: ManualClock(now: start),
            retention: .init(retention: .init(history: .seconds(86400), runsKeptPerApp: 1))
        ) { daemon in
            let app = "com.example.pruned"
            try await daemon.register(
                app, command: [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"], interval: .never)
            for _ in 0..<3 {
                _ = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch?wait=30", as: RunRecord.self)
                daemon.clock.advance(by: .seconds(3600))
            }
            func history() async throws -> [RunRecord] {
                try await daemon.admin.send(.get, "/v1/apps/\(app)/history?limit=100", as: [RunRecord].self)
            }
            #expect(try await history().count == 3)
            // Runs stay the month the fetch policy reads their answers, whatever the history.
            daemon.clock.advance(by: .seconds(29 * 86400))
            daemon.daemon.pruneDoorbell.ring()
            try await daemon.waitUntil { try await history().count == 1 }
            #expect(try await history().first?.outcome == .newData)
        }
    }
}
