import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// The spine end to end: a real daemon (in process, virtual clock) launching the real NewsFeed
/// example as a child process, and bgctl driving it.
@Suite(.timeLimit(.minutes(5)))
struct FetchEndToEndTests {
    static let newsfeed = "com.example.newsfeed"

    func newsCount(_ daemon: TestDaemon) throws -> Int {
        let url = URL(fileURLWithPath: daemon.directory + "/state/containers/\(Self.newsfeed)/news.json")
        // No file yet: the app has only its pre-populated item, which it writes with its first news.
        guard FileManager.default.fileExists(atPath: url.path) else { return 1 }
        let items = try JSONSerialization.jsonObject(with: Data(contentsOf: url)) as? [Any]
        return items?.count ?? 0
    }

    @Test func theSchedulerWakesTheExampleAndRecordsItsAnswer() async throws {
        try await TestDaemon.with { daemon in
            try await daemon.register(
                Self.newsfeed, command: [try BuiltProducts.path(of: "NewsFeed")], interval: .minimum)
            let due = try await daemon.plannedWake(of: Self.newsfeed)
            #expect(due == daemon.clock.now.addingTimeInterval(15 * 60))

            var expectedItems = 1  // the seed's pre-populated item
            for round in 1...3 {
                let due = try await daemon.plannedWake(of: Self.newsfeed) { $0.recentRuns.count == round - 1 }
                let run = try await daemon.waitForRunEnd(of: Self.newsfeed) { daemon.clock.advance(to: due) }
                #expect(run.trigger == .scheduled)
                #expect(run.launched)
                #expect(run.reasons.map(\.code).contains(.due))
                #expect(run.outcome == .newData || run.outcome == .noData, "\(run)")
                if run.outcome == .newData { expectedItems += 1 }
                #expect(try newsCount(daemon) == expectedItems, "the recorded answer matches what the app did")
            }
            let history = try await daemon.admin.send(.get, "/v1/apps/\(Self.newsfeed)/history", as: [RunRecord].self)
            #expect(history.count == 3)
            #expect(
                zip(history, history.dropFirst()).allSatisfy { $0.startedAt.timeIntervalSince($1.startedAt) >= 15 * 60 }
            )
        }
    }

    @Test func bgctlSimulateFetchGoesThroughTheProductionPath() async throws {
        try await TestDaemon.with { daemon in
            try await daemon.register(
                Self.newsfeed, command: [try BuiltProducts.path(of: "NewsFeed")], interval: .never)
            let output = try await Command.run(
                try BuiltProducts.path(of: "bgctl"),
                ["simulate", "fetch", Self.newsfeed, "--socket", daemon.socketPath, "--json"])
            #expect(output.status == 0, "\(output.standardError)")
            let run = try WireCoding.makeDecoder().decode(RunRecord.self, from: Data(output.standardOutput.utf8))
            #expect(run.trigger == .manual)
            #expect(run.reasons.map(\.code) == [.manualRequest])
            #expect(run.outcome == .newData || run.outcome == .noData)

            let history = try await Command.run(
                try BuiltProducts.path(of: "bgctl"), ["history", Self.newsfeed, "--socket", daemon.socketPath])
            #expect(history.standardOutput.contains(run.outcome!.rawValue))
            #expect(history.standardOutput.contains("manualRequest"))

            let why = try await Command.run(
                try BuiltProducts.path(of: "bgctl"), ["why", Self.newsfeed, "--socket", daemon.socketPath])
            #expect(why.standardOutput.contains("fetchDisabled"), "\(why.standardOutput)")
        }
    }

    @Test func aConnectedAppGetsTheFetchOnItsStreamWithoutALaunch() async throws {
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register("com.example.live", command: ["/bin/false"], interval: .minimum)
            let app = BackgroundApplication(
                appID: registered.app.id, token: registered.token, socketPath: daemon.socketPath)
            app.onBackgroundFetch { .newData }
            try await withThrowingTaskGroup(of: Void.self) { group in
                try await daemon.waitFor({ if case .appConnected = $0 { () } else { nil } }) {
                    group.addTask { try await app.run() }
                }
                let run = try await daemon.waitForRunEnd(of: "com.example.live") {
                    _ = try await daemon.admin.send(.post, "/v1/apps/com.example.live/fetch", as: RunRecord.self)
                }
                #expect(run.outcome == .newData)
                #expect(run.launched == false)
                try await app.setMinimumBackgroundFetchInterval(.every(.seconds(3600)))
                try await app.applicationDidBecomeActive()
                #expect(try await daemon.store.opens(of: registered.app.id).count == 1)
                #expect(try await app.summary().fetchInterval == .every(.seconds(3600)))
                group.cancelAll()
            }
        }
    }
}
