import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Synchronization
import Testing

/// The durable outbox as an app sees it: every open event again after a reconnect, in order,
/// with the same sequence number, until it is acknowledged or its run ends.
@Suite(.timeLimit(.minutes(5)))
struct EventOutboxTests {
    /// Opens the app's stream, reads up to the first event, then closes the stream.
    func firstEvent(_ client: DaemonClient) async throws -> AppEvent? {
        let messages = try await client.stream("/v1/app/events")
        for try await message in messages {
            if case .event(let event) = message { return event }
        }
        return nil
    }

    /// An open stream hears `hello` again every 30 s of bgd's time (`KeepAlive`), so a client's
    /// read timeout does not fire on a quiet bgd — also when the wall clock was set back an hour
    /// meanwhile (before, the next one then waited for the hour).
    @Test func anOpenStreamHearsAKeepAliveAfterTheClockIsSetBack() async throws {
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register("com.example.kept", command: ["/bin/false"], interval: .never)
            let messages = try await DaemonClient(socketPath: daemon.socketPath, token: registered.token)
                .stream("/v1/app/events")
            let hellos = ObservabilityTests.Tally()
            let reader = Task {
                for try await message in messages { if case .hello = message { hellos.count.withLock { $0 += 1 } } }
            }
            defer { reader.cancel() }
            #expect(await eventually { hellos.count.withLock { $0 } == 1 }, "no hello")
            // The keep-alive starts sleeping once it hears of the stream, at a moment the test
            // cannot see: 30 s of bgd's time at a time until it has spoken; then once more after
            // the wall clock is set back (it sleeps again as soon as it has spoken).
            func movesUntilHello(_ count: Int) async -> Int {
                var moves = 0
                while hellos.count.withLock({ $0 }) < count && moves < 5 {
                    daemon.clock.advance(by: .seconds(30))
                    moves += 1
                    _ = await eventually { hellos.count.withLock { $0 } >= count }
                }
                return moves
            }
            let moves = await movesUntilHello(2)
            #expect(hellos.count.withLock { $0 } >= 2, "no keep-alive in \(moves * 30) s of bgd's time")
            daemon.clock.jump(by: .seconds(-3600))
            let after = await movesUntilHello(3)
            #expect(hellos.count.withLock { $0 } >= 3, "no keep-alive in \(after * 30) s of bgd's time after a set-back")
        }
    }

    @Test func anUnacknowledgedEventComesAgainAfterAReconnect() async throws {
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register("com.example.outbox", command: ["/bin/false"], interval: .never)
            let app = DaemonClient(socketPath: daemon.socketPath, token: registered.token)
            // Connected, so the run goes to the stream rather than to a launch.
            let first = try await withThrowingTaskGroup(of: AppEvent?.self) { group in
                try await daemon.waitFor({ if case .appConnected = $0 { () } else { nil } }) {
                    group.addTask { try await firstEvent(app) }
                }
                _ = try await daemon.admin.send(.post, "/v1/apps/com.example.outbox/fetch", as: RunRecord.self)
                return try await group.next() ?? nil
            }
            let event = try #require(first)
            guard case .fetch(let run, _) = event.body else { Issue.record("not a fetch"); return }
            #expect(event.seq == EventSequence(1))

            // The app went away without answering: on reconnect, the same event, same seq.
            let again = try await firstEvent(app)
            #expect(again == event)

            // Answering ends the run and settles its event: the next event the app sees is a new one.
            _ = try await app.send(
                .post, "/v1/app/runs/\(run)/result", body: FetchResultReport(result: .noData), as: RunRecord.self)
            let next = try await withThrowingTaskGroup(of: AppEvent?.self) { group in
                try await daemon.waitFor({ if case .appConnected = $0 { () } else { nil } }) {
                    group.addTask { try await firstEvent(app) }
                }
                _ = try await daemon.admin.send(.post, "/v1/apps/com.example.outbox/fetch", as: RunRecord.self)
                return try await group.next() ?? nil
            }
            #expect(next?.seq == EventSequence(2))
            let outbox = try await daemon.admin.send(.get, "/v1/apps/com.example.outbox/events", as: [OutboxEntry].self)
            #expect(outbox.map(\.event.seq.rawValue) == [1, 2])
            #expect(outbox.map(\.closedBy) == ["runEnded", nil])
        }
    }

    /// A backlog longer than one read of the store (bgd reads it a page at a time, so a peer
    /// that stops reading holds a page, not the backlog) comes whole, in order, once.
    @Test func aLongBacklogComesWholeInOrder() async throws {
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register("com.example.outbox", command: ["/bin/false"], interval: .never)
            for n in 0..<100 {  // two events each: 200, three pages and a bit
                let request = TransferRequest(session: "s\(n)", url: URL(string: "http://127.0.0.1:9/\(n)")!)
                let created = try await daemon.store.createTransfer(request, app: registered.app.id, now: daemon.clock.now) {
                    id in (daemon.directory + "/\(id).partial", daemon.directory + "/\(id)")
                }
                _ = try await daemon.store.finishTransfer(created.record.id, .cancelled, now: daemon.clock.now)
            }
            let app = DaemonClient(socketPath: daemon.socketPath, token: registered.token)
            var received: [Int64] = []
            for try await message in try await app.stream("/v1/app/events") {
                if case .event(let event) = message { received.append(event.seq.rawValue) }
                if received.count == 200 { break }
            }
            #expect(received == Array(1...200))
        }
    }

    @Test func acknowledgementsAreCheckedAgainstWhatWasSent() async throws {
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register("com.example.ack", command: ["/bin/false"], interval: .never)
            let run = try await daemon.admin.send(.post, "/v1/apps/com.example.ack/fetch", as: RunRecord.self)
            #expect(run.outcome == nil || run.outcome == .crashed || run.outcome == .launchFailed)
            for seq in [0, 2, 99] {
                let answer = try await RawHTTP.request(
                    daemon.socketPath, .POST, "/v1/app/events/ack", body: Data(#"{"seq":\#(seq)}"#.utf8),
                    token: registered.token)
                #expect(answer.status == 400)
                #expect(answer.errorCode == "invalidSequence")
            }
            let good = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/events/ack", body: Data(#"{"seq":1}"#.utf8), token: registered.token)
            #expect(good.status == 204)
            let again = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/events/ack", body: Data(#"{"seq":1}"#.utf8), token: registered.token)
            #expect(again.status == 204, "acknowledging twice is harmless")
        }
    }

    @Test func theSDKHandsEachEventToTheHandlerOnce() async throws {
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register("com.example.once", command: ["/bin/false"], interval: .never)
            let app = BackgroundApplication(
                appID: registered.app.id, token: registered.token, socketPath: daemon.socketPath)
            let calls = Counter()
            app.onBackgroundFetch {
                calls.increment()
                return .newData
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                try await daemon.waitFor({ if case .appConnected = $0 { () } else { nil } }) {
                    group.addTask { try await app.run() }
                }
                for _ in 1...3 {
                    let run = try await daemon.waitForRunEnd(of: "com.example.once") {
                        _ = try await daemon.admin.send(.post, "/v1/apps/com.example.once/fetch", as: RunRecord.self)
                    }
                    #expect(run.outcome == .newData)
                }
                group.cancelAll()
            }
            #expect(calls.value == 3)
        }
    }
}

final class Counter: Sendable {
    private let count = Mutex(0)
    func increment() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
