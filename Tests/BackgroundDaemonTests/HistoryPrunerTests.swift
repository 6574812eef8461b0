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

    /// A transfer the app paused and never resumed (its resume data thrown away) is cancelled
    /// once it has been left for the history: the app hears `cancelled`, the row ends. Before,
    /// it stayed for good, with its partial file, counted against the app's outstanding limit.
    @Test func aTransferPausedAndLeftIsCancelledAfterTheHistory() async throws {
        let start = Date(timeIntervalSince1970: 1_767_571_200)
        try await TestDaemon.with(
            clock: ManualClock(now: start), retention: .init(retention: .init(history: .seconds(86400)))
        ) { daemon in
            let app = try await daemon.register("com.example.pauser", command: ["/bin/true"], interval: .never)
            func submit() async throws -> Int {
                let body = try WireCoding.makeEncoder().encode(
                    TransferRequest(
                        session: "s", url: URL(string: "http://127.0.0.1:9/x")!,
                        earliestBegin: start.addingTimeInterval(10 * 86400)))
                let created = try await RawHTTP.request(
                    daemon.socketPath, .POST, "/v1/app/transfers", body: body, token: app.token)
                return try #require(created.json["id"] as? Int)
            }
            let (left, waiting) = (try await submit(), try await submit())
            let paused = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers/\(left)/pause", token: app.token)
            #expect(paused.status == 200)
            func state(_ id: Int) async throws -> TransferState {
                try await daemon.admin.send(.get, "/v1/transfers/\(id)", as: TransferRecord.self).state
            }
            daemon.daemon.pruneDoorbell.ring()  // within the history: kept
            daemon.clock.advance(by: .seconds(3600))
            #expect(try await state(left) == .paused)

            daemon.clock.advance(by: .seconds(2 * 86400))
            daemon.daemon.pruneDoorbell.ring()
            try await daemon.waitUntil { try await state(left) == .cancelled }
            #expect(try await state(waiting) == .waiting, "only a paused one is cancelled")
            let events = try await daemon.store.openEvents(for: AppID(rawValue: "com.example.pauser")!)
            #expect(
                events.contains {
                    if case .transferCompleted(let transfer, _, _, _, let error?) = $0.body {
                        return transfer.rawValue == Int64(left) && error.code == .cancelled
                    }
                    return false
                }, "the app hears it was cancelled: \(events)")
        }
    }
}
