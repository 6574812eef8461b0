import Background
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

@testable import BackgroundDaemon

/// A run bgd gives to an app the user runs, when bgd watches no process of it (the app never
/// reported its state): the app's connection is all bgd knows of it.
@Suite(.timeLimit(.minutes(2)))
struct ForegroundRunTests {
    /// Its connection closes and it does not connect again within the grace: the run is taken
    /// for crashed (a push would go again), not left to expire and be blamed on the app. One
    /// that connects again in time keeps its run, and answers it.
    @Test func aRunGivenToAnAppThatWentAwayIsTakenForCrashed() async throws {
        try await TestDaemon.with { daemon in
            let id = "com.example.quits"
            let registered = try await daemon.register(id, command: ["/bin/false"], interval: .never)
            let client = DaemonClient(socketPath: daemon.socketPath, token: registered.token)
            func connect() async throws -> StreamMessages.Iterator {
                var messages = try await client.stream("/v1/app/events").makeAsyncIterator()
                _ = try await messages.next()  // hello
                return messages
            }
            func outcome(of run: RunRecord) async throws -> RunOutcome? { try await daemon.store.run(run.id)?.outcome }

            // Back within the grace: the run stands.
            var first: StreamMessages.Iterator? = try await connect()
            let kept = try await daemon.admin.send(.post, "/v1/apps/\(id)/fetch", as: RunRecord.self)
            #expect(!kept.launched, "given to the connected app")
            first = nil
            #expect(try await eventuallyAsync { try await !daemon.isConnected(id) })
            var second: StreamMessages.Iterator? = try await connect()
            daemon.clock.advance(by: RunCoordinator.reconnectGrace + .seconds(1))
            let answer = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/runs/\(kept.id)/result",
                body: try WireCoding.makeEncoder().encode(FetchResultReport(result: .newData)), token: registered.token)
            #expect(answer.status == 200, "\(answer.status)")
            #expect(try await outcome(of: kept) == .newData)

            // Gone for good: crashed after the grace, well before the budget's 30 s.
            let lost = try await daemon.admin.send(.post, "/v1/apps/\(id)/fetch", as: RunRecord.self)
            #expect(!lost.launched)
            let before = daemon.clock.elapsed
            second = nil
            #expect(try await eventuallyAsync { try await !daemon.isConnected(id) })
            #expect(
                try await eventuallyAsync {
                    daemon.clock.advance(by: .milliseconds(500))
                    return try await outcome(of: lost) != nil
                })
            let ended = try #require(try await daemon.store.run(lost.id))
            #expect(ended.outcome == .crashed && daemon.clock.elapsed - before < .seconds(30), "\(ended)")
            #expect(ended.detail?.contains("did not connect again") == true, "\(ended.detail ?? "")")
            _ = (first, second)
        }
    }
}
