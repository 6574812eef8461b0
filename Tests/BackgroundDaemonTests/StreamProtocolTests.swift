import BackgroundModel
import Foundation
import Synchronization
import Testing

@testable import Background

/// The library's side of the event stream where bgd says what a real bgd of this version does
/// not: an event of a kind only a newer bgd sends, an acknowledgement refused while the stream
/// lives, a stream that ends under a handler (a `ScriptedDaemon` says it).
@Suite(.timeLimit(.minutes(2)))
struct StreamProtocolTests {
    let appID = AppID(rawValue: "com.example.scripted")!
    let createdAt = Date(timeIntervalSince1970: 1_800_000_000)

    func fetch(_ seq: Int64, run: Int64) -> StreamMessage {
        .event(
            AppEvent(
                seq: EventSequence(rawValue: seq), createdAt: createdAt,
                body: .fetch(run: RunID(rawValue: run), budget: .seconds(30))))
    }

    /// Event `seq` of a kind only a newer bgd sends (a fetch, renamed).
    func newerKind(_ seq: Int64) throws -> String {
        String(decoding: try WireCoding.makeEncoder().encode(fetch(seq, run: 7)), as: UTF8.self)
            .replacingOccurrences(of: "\"fetch\"", with: "\"backgroundSync\"")
    }

    /// `app` running against `bgd` (a user's app: it connects again when its stream ends), its
    /// first stream open and greeted, for `body`.
    func running(
        _ app: BackgroundApplication, on bgd: ScriptedDaemon, _ body: () async throws -> Void
    )
        async throws
    {
        let running = Task { try await app.run() }
        defer { running.cancel() }
        #expect(await eventually { bgd.streamsOpened == 1 })
        try bgd.send(.hello(app: appID, launchedForRun: nil))
        try await body()
    }

    /// An event this library cannot read (here a kind only a newer bgd has) is acknowledged
    /// unhandled, and the stream goes on: the fetch after it is handled on the same connection.
    /// Before, the stream was taken for broken and the app connected again, to be sent the same
    /// event, for ever.
    @Test func anEventOfAKindThisLibraryDoesNotKnowIsSkippedAndTheStreamGoesOn() async throws {
        try await ScriptedDaemon.with { bgd in
            let app = BackgroundApplication(appID: appID, token: "scripted", socketPath: bgd.socketPath)
            app.onBackgroundFetch { .newData }
            try await running(app, on: bgd) {
                let newer = try newerKind(1)
                #expect(newer.contains("backgroundSync"))
                bgd.send(newer)
                try bgd.send(fetch(2, run: 8))
                #expect(await eventually { bgd.acknowledged.count == 2 })
                #expect(bgd.acknowledged == [EventSequence(rawValue: 1), EventSequence(rawValue: 2)])
                #expect(bgd.results == [RunID(rawValue: 8): .newData])
                #expect(bgd.streamsOpened == 1, "the stream was never taken for broken")
            }
        }
    }

    /// A skipped event whose acknowledgement was lost with its connection is acknowledged when
    /// bgd sends it again on the next: before, it was taken as handled and left open for good.
    @Test func aSkippedEventIsAcknowledgedWhenSentAgainAfterAReconnect() async throws {
        try await ScriptedDaemon.with { bgd in
            let app = BackgroundApplication(appID: appID, token: "scripted", socketPath: bgd.socketPath)
            try await running(app, on: bgd) {
                bgd.refuseAcknowledgements(1)
                bgd.send(try newerKind(1))
                #expect(await eventually { bgd.refusedAcknowledgements.count == 1 })
                bgd.endStreams()  // bgd restarts: the app connects again, and is sent the event again
                #expect(await eventually { bgd.streamsOpened == 2 })
                try bgd.send(.hello(app: appID, launchedForRun: nil))
                bgd.send(try newerKind(1))
                #expect(await eventually { bgd.acknowledged == [EventSequence(rawValue: 1)] })
            }
        }
    }

    /// An acknowledgement bgd refuses (its disk full) is tried again at the stream's next hello,
    /// and does not end the connection: a handler in flight runs on. Before, one refused in the
    /// read loop (an event sent again) dropped the connection, cancelling every handler, and one
    /// refused after a handler's answer was never tried again on that connection.
    @Test func aRefusedAcknowledgementIsTriedAgainAtTheNextHello() async throws {
        try await ScriptedDaemon.with { bgd in
            let app = BackgroundApplication(appID: appID, token: "scripted", socketPath: bgd.socketPath)
            let (gate, open) = AsyncStream<Void>.makeStream()
            let cancelled = Mutex(false)
            let calls = Mutex(0)
            app.onBackgroundFetch {
                // The first run waits for the gate; the others answer at once.
                let first = calls.withLock { calls -> Bool in
                    calls += 1
                    return calls == 1
                }
                guard first else { return .noData }
                for await _ in gate { return .newData }
                cancelled.withLock { $0 = true }
                return .failed
            }
            try await running(app, on: bgd) {
                // A run whose handler waits (run 1), and one answered at once whose ack is refused.
                try bgd.send(fetch(1, run: 1))
                #expect(await eventually { app.handlersRunning == 1 })
                bgd.refuseAcknowledgements(1)
                try bgd.send(fetch(2, run: 2))
                #expect(await eventually { bgd.refusedAcknowledgements == [EventSequence(rawValue: 2)] })
                #expect(bgd.results[RunID(rawValue: 2)] == .noData)

                // The event sent again (as bgd does after a lost ack): refused again, in the read loop.
                bgd.refuseAcknowledgements(1)
                try bgd.send(fetch(2, run: 2))
                #expect(await eventually { bgd.refusedAcknowledgements.count == 2 })
                #expect(bgd.acknowledged.isEmpty)

                // The next hello (a keep-alive) takes it; the connection and run 1's handler live on.
                try bgd.send(.hello(app: appID, launchedForRun: nil))
                #expect(await eventually { bgd.acknowledged == [EventSequence(rawValue: 2)] })
                #expect(bgd.streamsOpened == 1)
                #expect(app.handlersRunning == 1 && !cancelled.withLock { $0 })
                open.yield()
                #expect(await eventually { bgd.acknowledged.count == 2 })
                #expect(bgd.results[RunID(rawValue: 1)] == .newData)
            }
        }
    }

    /// A run's answer bgd did not take (a 503: a moment's trouble) is kept and sent again when
    /// bgd sends the event again, and only then is the event acknowledged — the handler not run
    /// twice. Before, the event sent again was taken for answered and acknowledged, and the run
    /// ended `expired` for an answer bgd never had.
    @Test func anAnswerBgdDidNotTakeIsSentAgainWithItsEvent() async throws {
        try await ScriptedDaemon.with { bgd in
            let app = BackgroundApplication(appID: appID, token: "scripted", socketPath: bgd.socketPath)
            let calls = Mutex(0)
            app.onBackgroundFetch {
                calls.withLock { $0 += 1 }
                return .newData
            }
            try await running(app, on: bgd) {
                bgd.refuseResults(1)
                try bgd.send(fetch(1, run: 5))
                #expect(await eventually { app.answersNotTaken == 1 })
                #expect(bgd.results.isEmpty && bgd.acknowledged.isEmpty)
                try bgd.send(fetch(1, run: 5))
                #expect(await eventually { bgd.acknowledged == [EventSequence(rawValue: 1)] })
                #expect(bgd.results[RunID(rawValue: 5)] == .newData)
                #expect(calls.withLock { $0 } == 1, "the handler ran once")
            }
        }
    }

    /// A process bgd launched whose stream ends (bgd stopped) ends too, its handlers cancelled:
    /// before, it waited for each — one waiting for its expiration, which only that stream could
    /// bring, for ever.
    @Test func aLaunchedProcessEndsWithItsStreamThoughAHandlerStillRuns() async throws {
        try await ScriptedDaemon.with { bgd in
            let app = BackgroundApplication(
                appID: appID, token: "scripted", socketPath: bgd.socketPath, launchReason: .fetch, containerPath: nil)
            let (never, _) = AsyncStream<Void>.makeStream()
            app.onBackgroundFetch {
                for await _ in never {}
                throw CancellationError()  // the wait ends only when the handler is cancelled
            }
            let ended = Mutex(false)
            let running = Task {
                try await app.run()
                ended.withLock { $0 = true }
            }
            defer { running.cancel() }
            #expect(await eventually { bgd.streamsOpened == 1 })
            try bgd.send(.hello(app: appID, launchedForRun: RunID(rawValue: 1)))
            try bgd.send(fetch(1, run: 1))
            #expect(await eventually { app.handlersRunning == 1 })
            bgd.endStreams()
            #expect(await eventually { ended.withLock { $0 } }, "run() returned with its stream")
            #expect(app.handlersRunning == 0)
            #expect(bgd.results.isEmpty && bgd.acknowledged.isEmpty, "the run is given up, not answered")
        }
    }
}
