import BackgroundModel
import BackgroundTesting
import Foundation
import Synchronization
import Testing

@testable import Background

/// A delegate that never calls its completion handler (an app with a bug): when the run's time
/// is up the library gives its answer up, as a handler cancelled does, and nothing of the run is
/// left in the app. Before, the wait for the handler had no end: the run's place in the app, its
/// event and whatever waited on the connection were held for as long as the app ran.
@Suite(.timeLimit(.minutes(2)))
struct SilentDelegateTests {
    final class NeverAnswers: BackgroundApplicationDelegate, Sendable {
        func application(
            _ application: BackgroundApplication,
            performFetchWithCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void
        ) {}
    }

    @Test func aCompletionHandlerNeverCalledIsGivenUpWhenTheTimeIsUp() async throws {
        try await TestDaemon.with { daemon in
            let id = "com.example.silent"
            let registered = try await daemon.register(id, command: ["/bin/false"], interval: .never)
            let application = BackgroundApplication(
                appID: AppID(rawValue: id)!, token: registered.token, socketPath: daemon.socketPath)
            application.delegate = NeverAnswers()
            let connection = Task { try await application.run() }
            defer { connection.cancel() }
            try await daemon.waitUntilConnected(id)
            let run = try await daemon.admin.send(.post, "/v1/apps/\(id)/fetch", as: RunRecord.self)
            #expect(!run.launched, "given to the connected app")
            #expect(await eventually { application.handlersRunning == 1 })
            let ended = try await daemon.waitForRunEnd(of: id) { daemon.clock.advance(by: .seconds(60)) }
            #expect(ended.outcome == .expired, "\(ended)")
            #expect(await eventually { application.handlersRunning == 0 })
        }
    }

    /// bgd stops while the app's handler still runs (here one that never answers): the app
    /// connects to the next bgd at once, its handler given up. Before, it waited for the handler
    /// before connecting again — for ever, as only the stream that ended could expire it.
    @Test func anAppConnectsAgainThoughAHandlerStillRuns() async throws {
        let directory = TemporaryDirectory.make()
        let id = "com.example.silent"
        let application = try await TestDaemon.with(directory: directory) { daemon in
            let registered = try await daemon.register(id, command: ["/bin/false"], interval: .never)
            let application = BackgroundApplication(
                appID: AppID(rawValue: id)!, token: registered.token, socketPath: daemon.socketPath)
            application.delegate = NeverAnswers()
            return application
        }
        let connection = Mutex<Task<Void, any Error>?>(nil)
        defer { connection.withLock { $0?.cancel() } }
        try await TestDaemon.with(directory: directory) { daemon in
            connection.withLock { $0 = Task { try await application.run() } }
            try await daemon.waitUntilConnected(id)
            _ = try await daemon.admin.send(.post, "/v1/apps/\(id)/fetch", as: RunRecord.self)
            #expect(await eventually { application.handlersRunning == 1 })
        }  // bgd stops, the handler still waiting
        try await TestDaemon.with(directory: directory) { daemon in
            try await daemon.waitUntilConnected(id)
        }
    }

    final class AnswersLate: BackgroundApplicationDelegate, Sendable {
        let pending = Mutex<(@Sendable (BackgroundFetchResult) -> Void)?>(nil)
        let warned = Mutex(false)
        func application(
            _ application: BackgroundApplication,
            performFetchWithCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void
        ) { pending.withLock { $0 = completionHandler } }
        func applicationBackgroundFetchWillExpire(_ application: BackgroundApplication) {
            warned.withLock { $0 = true }
        }
    }

    /// bgd warns 5 s before the run's deadline; a delegate that answers after the warning and
    /// before the deadline is heard. (The first version of giving an unanswered delegate up gave
    /// it up at the warning.)
    @Test func aDelegatesAnswerBetweenTheWarningAndTheDeadlineCounts() async throws {
        try await TestDaemon.with { daemon in
            let id = "com.example.late"
            let registered = try await daemon.register(id, command: ["/bin/false"], interval: .never)
            let application = BackgroundApplication(
                appID: AppID(rawValue: id)!, token: registered.token, socketPath: daemon.socketPath, clock: daemon.clock
            )
            let delegate = AnswersLate()
            application.delegate = delegate
            let connection = Task { try await application.run() }
            defer { connection.cancel() }
            try await daemon.waitUntilConnected(id)
            let run = try await daemon.admin.send(.post, "/v1/apps/\(id)/fetch", as: RunRecord.self)
            #expect(await eventually { delegate.pending.withLock { $0 != nil } })
            let budget = run.deadline.duration(since: run.startedAt)
            daemon.clock.advance(by: budget - .seconds(3))  // past the warning, before the deadline
            #expect(await eventually { delegate.warned.withLock { $0 } })
            let ended = try await daemon.waitForRunEnd(of: id) { delegate.pending.withLock { $0 }?(.newData) }
            #expect(ended.outcome == .newData, "\(ended)")
        }
    }
}
