import Background
import BackgroundModel
import BackgroundPolicy
import BackgroundTesting
import Foundation
import Testing

@testable import BackgroundDaemon

/// An app with two event streams at once — a process bgd launched and the app as the user
/// opened it meanwhile, or two instances the user runs — gets each event on one of them.
@Suite(.timeLimit(.minutes(3)))
struct StreamOwnershipTests {
    static let budget = RunBudget(budget: .seconds(30), expirationLead: .seconds(5), killGrace: .seconds(5))

    /// Reads the stream's messages up to its next event (nil: a keep-alive came first, unless
    /// `skippingKeepAlives`).
    static func nextEvent(
        _ messages: inout StreamMessages.Iterator, skippingKeepAlives: Bool = false
    ) async throws -> AppEvent? {
        while let message = try await messages.next() {
            switch message {
            case .event(let event): return event
            case .hello: if !skippingKeepAlives { return nil }
            case .control: continue
            }
        }
        throw BackgroundError.disconnected
    }

    static func connect(_ client: DaemonClient) async throws -> StreamMessages.Iterator {
        var messages = try await client.stream("/v1/app/events").makeAsyncIterator()
        _ = try await messages.next()  // hello
        return messages
    }

    /// bgd launched the app for a fetch; the user opens it while that fetch runs. The opened
    /// app is not sent the launched process's fetch, and the next run is the opened app's.
    /// Before, the opened app was handed that fetch too, and both ran it.
    @Test func theRunningAppIsNotSentALaunchedProcesssRun() async throws {
        try await TestDaemon.with(budget: Self.budget) { daemon in
            let app = "com.example.both"
            let registered = try await daemon.register(
                app, command: [try BuiltProducts.path(of: "bgd-fixture-app"), "hang"], interval: .never)
            let logPath = daemon.directory + "/state/containers/\(app)/fixture.log"
            func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

            var launchedRun: RunRecord?
            _ = try await daemon.waitFor({ if case .processLaunched = $0 { () } else { nil } }) {
                launchedRun = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
            }
            let launched = try #require(launchedRun)
            #expect(launched.launched)
            let pid = try #require(try await daemon.store.run(launched.id)?.processID)
            #expect(await eventually { log().contains("fetch \(launched.id) pid") }, "\(log())")

            // The user opens the app: a keep-alive, and no event before it.
            let client = DaemonClient(socketPath: daemon.socketPath, token: registered.token)
            var opened = try await Self.connect(client)
            daemon.daemon.appEvents.broker.keepAlive()
            let sent = try await Self.nextEvent(&opened)
            #expect(sent == nil, "the opened app was sent the launched process's \(String(describing: sent))")

            // The launched fetch expires and its process ends; the next fetch is the opened app's.
            _ = try await daemon.waitFor({ activity -> Void? in
                if case .processExited(_, pid, _) = activity { return () }
                return nil
            }) { daemon.clock.advance(by: .seconds(41)) }
            #expect(try await daemon.store.run(launched.id)?.outcome == .expired)
            let given = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
            #expect(!given.launched, "given to the app the user runs")
            let next = try await Self.nextEvent(&opened, skippingKeepAlives: true)
            #expect(next?.run == given.id, "\(String(describing: next))")
            let answer = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/runs/\(given.id)/result",
                body: try WireCoding.makeEncoder().encode(FetchResultReport(result: .newData)), token: registered.token)
            #expect(answer.status == 200, "\(answer.status)")
        }
    }

    /// Two instances the user runs: a run's event goes to one of them; when that one closes
    /// with it unanswered, the other is sent it.
    @Test func anEventGoesToOneStreamAndOnToAnotherWhenThatOneCloses() async throws {
        try await TestDaemon.with(budget: Self.budget) { daemon in
            let app = "com.example.twice"
            let registered = try await daemon.register(app, command: ["/bin/false"], interval: .never)
            let client = DaemonClient(socketPath: daemon.socketPath, token: registered.token)
            var streams: [StreamMessages.Iterator?] = [try await Self.connect(client), try await Self.connect(client)]
            let run = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
            #expect(!run.launched)
            // A keep-alive after the run's news: each stream says what it sent before it.
            daemon.daemon.appEvents.broker.keepAlive()
            var sentOn: [Int] = []
            for index in streams.indices {
                var messages = try #require(streams[index])
                if let event = try await Self.nextEvent(&messages) {
                    #expect(event.run == run.id)
                    sentOn.append(index)
                    #expect(try await Self.nextEvent(&messages) == nil, "the keep-alive follows")
                }
                streams[index] = messages
            }
            #expect(sentOn.count == 1, "sent on streams \(sentOn)")

            // The one that had it closes: the other is sent it now.
            let holder = try #require(sentOn.first)
            streams[holder] = nil
            var other = try #require(streams[1 - holder])
            let resent = try await Self.nextEvent(&other)
            #expect(resent?.run == run.id, "\(String(describing: resent))")
        }
    }
}

/// The broker's part: who may take which event, and the reading again that a stream's end or a
/// run given away asks for.
struct EventHoldingTests {
    static let app = AppID(rawValue: "com.example.held")!
    static func event(_ seq: Int64, run: Int64?) -> AppEvent {
        let body: AppEvent.Body =
            if let run { .fetch(run: RunID(rawValue: run), budget: .seconds(30)) } else {
                .sessionEventsFinished(session: "s")
            }
        return AppEvent(seq: EventSequence(rawValue: seq), createdAt: Date(timeIntervalSince1970: 0), body: body)
    }

    @Test func whoMayTakeWhat() {
        let launched = StreamOwner.launched(AppToken(rawValue: "l"))
        let other = StreamOwner.launched(AppToken(rawValue: "o"))
        let run = Self.event(1, run: 7)
        let transfer = Self.event(2, run: nil)
        #expect(launched.mayTake(run, holder: launched, runningAppConnected: true))
        #expect(!other.mayTake(run, holder: launched, runningAppConnected: false))
        #expect(!StreamOwner.runningApp.mayTake(run, holder: launched, runningAppConnected: true))
        #expect(StreamOwner.runningApp.mayTake(run, holder: .runningApp, runningAppConnected: true))
        #expect(!StreamOwner.runningApp.mayTake(run, holder: nil, runningAppConnected: true), "not given yet")
        #expect(StreamOwner.runningApp.mayTake(transfer, holder: nil, runningAppConnected: true))
        #expect(
            !launched.mayTake(transfer, holder: nil, runningAppConnected: true), "the app as the user runs it stays")
        #expect(launched.mayTake(transfer, holder: nil, runningAppConnected: false))
    }

    /// A transfer's event goes to the app as the user runs it; once it is gone, to the launched
    /// process, which is told to read again. An acknowledged event is held by no one.
    @Test func aTransferEventMovesToTheLaunchedProcessWhenTheRunningAppLeaves() throws {
        let broker = EventBroker()
        let launched = try #require(broker.subscribe(Self.app, owner: .launched(AppToken(rawValue: "l"))))
        let running = try #require(broker.subscribe(Self.app, owner: .runningApp))
        let transfer = [Self.event(3, run: nil)]
        #expect(broker.take(transfer, by: launched) == [.passedOver])
        #expect(broker.take(transfer, by: running) == [.send])
        #expect(broker.take(transfer, by: running) == [.sentAlready])
        _ = launched.news.take()
        broker.unsubscribe(running)
        #expect(launched.news.takeRewind(), "told to read again")
        #expect(launched.news.take() == [.openEvents])
        #expect(broker.take(transfer, by: launched) == [.send])
        broker.acknowledged(upTo: EventSequence(rawValue: 3), only: true, by: Self.app)
        let again = try #require(broker.subscribe(Self.app, owner: .runningApp))
        #expect(broker.take(transfer, by: again) == [.send], "acknowledged: held by no one")
    }

    /// A run's event read before the run was given is passed over; giving it tells its owner to
    /// read again, and an ended run's event is held by no one.
    @Test func aRunGivenAfterItsEventWasReadIsReadAgain() throws {
        let broker = EventBroker()
        let running = try #require(broker.subscribe(Self.app, owner: .runningApp))
        let fetch = [Self.event(4, run: 9)]
        #expect(broker.take(fetch, by: running) == [.passedOver], "not given yet")
        broker.give(RunID(rawValue: 9), of: Self.app, to: .runningApp)
        #expect(running.news.takeRewind())
        #expect(broker.take(fetch, by: running) == [.send])
        let second = try #require(broker.subscribe(Self.app, owner: .runningApp))
        #expect(broker.take(fetch, by: second) == [.passedOver], "held by the first")
        broker.runEnded(RunID(rawValue: 9))
        #expect(broker.take(fetch, by: second) == [.passedOver], "not given to anyone any more")
    }

    /// News of one process's background time goes to the streams of its kind: the launched
    /// process is not told the user's instance's time is up, nor the other way round.
    @Test func lifecycleNewsGoesToItsProcesssKind() throws {
        let broker = EventBroker()
        let running = try #require(broker.subscribe(Self.app, owner: .runningApp))
        let launched = try #require(broker.subscribe(Self.app, owner: .launched(AppToken(rawValue: "l"))))
        let expiring = ControlMessage.backgroundTimeExpiring(deadline: Date(timeIntervalSince1970: 30))
        broker.send(expiring, to: Self.app, launched: false)
        #expect(running.news.take() == [.control(expiring)])
        #expect(launched.news.take().isEmpty)
        broker.send(expiring, to: Self.app, launched: true)
        #expect(running.news.take().isEmpty)
        #expect(launched.news.take() == [.control(expiring)])
    }
}
