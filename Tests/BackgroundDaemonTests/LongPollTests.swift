import Background
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `?wait=` long-polls (`bgctl … --wait`): they end with their client and with bgd's stop, and
/// keep working one after another on a pooling client although each closes its connection.
@Suite(.timeLimit(.minutes(5)))
struct LongPollTests {
    /// A client that leaves a long-poll (`bgctl … --wait` interrupted with ^C) leaves nothing
    /// behind. Before, the wait held a subscription to bgd's activity for the rest of its time,
    /// up to ten minutes; a script that retried in a loop piled them up.
    @Test func aLongPollWhoseClientLeavesEndsAtOnce() async throws {
        try await TestDaemon.with { daemon in
            let before = daemon.activity.subscriberCount
            // A run that does not exist yet is waited for like one in flight.
            let poll = try longPoll(daemon, "/v1/runs/999?wait=600")
            #expect(await eventually { daemon.activity.subscriberCount == before + 1 }, "the long-poll did not begin")
            #expect(try await leave(poll, daemon, subscribersBefore: before), "the long-poll outlived its client")
        }
    }

    /// The same for a transfer's (`bgctl transfer wait`), here one held for a network.
    @Test func aTransferLongPollWhoseClientLeavesEndsAtOnce() async throws {
        let transfers = TransferTests()
        try await transfers.withOrigin { origin, daemon in
            _ = try await daemon.admin.send(
                .put, "/v1/env", body: ConditionOverrides(network: DeviceConditions.Network.none),
                as: ConditionsReport.self)
            let (record, _) = try await transfers.download(origin.url(seed: 13, size: 1000), daemon)
            let before = daemon.activity.subscriberCount
            let poll = try longPoll(daemon, "/v1/transfers/\(record.id)?wait=600")
            #expect(await eventually { daemon.activity.subscriberCount == before + 1 }, "the long-poll did not begin")
            #expect(try await leave(poll, daemon, subscribersBefore: before), "the long-poll outlived its client")
            #expect(try await daemon.admin.send(.get, "/v1/transfers/\(record.id)", as: TransferRecord.self).state == .waiting)
        }
    }

    /// `curl` on a `?wait=` request to bgd's socket, as `bgctl … --wait` makes it.
    func longPoll(_ daemon: TestDaemon, method: String = "GET", _ path: String) throws -> Spawned {
        let token = try #require(DaemonClient.operatorToken(socketPath: daemon.socketPath))
        return try Spawned(
            "/usr/bin/env",
            [
                "curl", "-s", "-X", method, "--unix-socket", daemon.socketPath, "-H", "Authorization: Bearer \(token)",
                "http://bgd\(path)",
            ])
    }

    /// Kills `poll` (^C), and says whether bgd let go of its wait's subscription to its activity.
    func leave(_ poll: Spawned, _ daemon: TestDaemon, subscribersBefore before: Int) async throws -> Bool {
        poll.signal(SIGKILL)
        _ = await poll.waitForExit()
        return await eventually { daemon.activity.subscriberCount == before }
    }

    /// `bgctl fetch APP --wait` interrupted (^C) leaves the run it started to run on: the client
    /// leaving ends the wait, not the run, which goes on to its end (here its budget's).
    @Test func aFetchWhoseWaiterLeavesRunsOn() async throws {
        try await TestDaemon.with { daemon in
            let app = "com.example.waited"
            try await daemon.register(app, command: [try BuiltProducts.path(of: "bgd-fixture-app"), "hang"], interval: .never)
            let before = daemon.activity.subscriberCount
            var poll: Spawned?
            let started = try await daemon.waitFor({ activity -> RunRecord? in
                if case .runStarted(let run) = activity, run.app.rawValue == app { return run }
                return nil
            }) {
                poll = try longPoll(daemon, method: "POST", "/v1/apps/\(app)/fetch?wait=600")
            }
            #expect(await eventually { daemon.activity.subscriberCount > before }, "the long-poll did not begin")
            #expect(try await leave(try #require(poll), daemon, subscribersBefore: before), "the long-poll outlived its client")
            let run = try await daemon.admin.send(.get, "/v1/runs/\(started.id)", as: RunRecord.self)
            #expect(run.outcome == nil, "the run ended with its waiter: \(run)")
            guard run.outcome == nil else { return }  // no end to wait for
            // It ends as any run does: its budget (30 s of bgd's clock) runs out on the hung app.
            let ended = try await daemon.waitForRunEnd(of: app) { daemon.clock.advance(by: .seconds(60)) }
            #expect(ended.id == started.id && ended.outcome == .expired, "\(ended)")
        }
    }

    /// Each answer to a long-poll closes its connection (`Connection: close`): the next request
    /// of a pooling client goes on a new one, and every one is answered.
    @Test func longPollsOneAfterAnotherOnOneClientAreAllAnswered() async throws {
        try await TestDaemon.with { daemon in
            _ = try await daemon.admin.send(
                .post, "/v1/apps",
                body: RegisterAppRequest(
                    id: AppID(rawValue: "com.example.poll")!, launchCommand: LaunchCommand(["/bin/true"])!),
                as: RegisteredApp.self)
            let admin = daemon.admin
            for _ in 0..<2 {
                let run = try await admin.send(.post, "/v1/apps/com.example.poll/fetch?wait=60", as: RunRecord.self)
                #expect(run.outcome != nil, "the run had not ended: \(run)")
                let again = try await admin.send(.get, "/v1/runs/\(run.id)?wait=1", as: RunRecord.self)
                #expect(again.id == run.id)
                _ = try await admin.send(.get, "/v1/status", as: DaemonStatus.self)
            }
        }
    }

    /// bgd's stop answers a long-poll at once, with what is so then. Before, the stop waited out
    /// the poll: up to ten minutes of bgd's clock (here, which never moves: for good), and
    /// systemd killed bgd at TimeoutStopSec.
    @Test func bgdsStopAnswersALongPollAtOnce() async throws {
        let poll = try await TestDaemon.with { daemon in
            let before = daemon.activity.subscriberCount
            let admin = daemon.admin
            // A run that does not exist yet is waited for like one in flight.
            let poll = Task {
                try await admin.send(.get, "/v1/runs/999?wait=600", as: RunRecord.self, timeout: .seconds(700))
            }
            #expect(await eventually { daemon.activity.subscriberCount == before + 1 }, "the long-poll did not begin")
            return poll
        }
        await #expect {
            _ = try await poll.value
        } throws: { error in
            (error as? BackgroundError)?.apiErrorCode == .unknownRun
        }
    }
}
