import BackgroundModel
import BackgroundPolicy
import BackgroundTesting
import Foundation
import Testing

@testable import BackgroundDaemon

/// The scheduler and the task dispatcher read the store, then start what is due. An app
/// unregistered, or a request cancelled, in between is passed over, and the others due start in
/// the same pass. Before, the first such start failed the whole pass, and every other app due
/// waited 30 s for the retry.
@Suite(.timeLimit(.minutes(2)))
struct VanishedWorkTests {
    let here = AppID(rawValue: "com.example.here")!
    let gone = AppID(rawValue: "com.example.gone")!
    static let refresh = "com.example.here.refresh"
    static let processing = "com.example.here.processing"

    func withApp(_ body: @Sendable (TestDaemon) async throws -> Void) async throws {
        try await TestDaemon.with(clock: ManualClock(now: Date(timeIntervalSince1970: 1_767_571_200))) { daemon in
            _ = try await daemon.register(
                here.rawValue, command: [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"], interval: .never,
                taskIdentifiers: [Self.refresh, Self.processing])
            try await body(daemon)
        }
    }

    @Test func aFetchPassPassesOverWhatWentSinceItsSnapshot() async throws {
        try await withApp { daemon in
            let plan = FetchPlan(
                starts: [
                    .init(app: gone, work: .fetch, servesPredictedOpen: false),
                    .init(app: here, work: .refreshTask(identifier: Self.refresh), servesPredictedOpen: false),
                    .init(app: here, work: .fetch, servesPredictedOpen: false),
                ], decisions: [], nextEvaluation: nil)
            let launched = try await daemon.daemon.scheduler.start(plan, now: daemon.clock.now)
            #expect(launched == [here], "the gone app's and the cancelled request's starts are passed over")
            #expect(try await daemon.store.runs(of: here).first?.trigger == .scheduled)
        }
    }

    @Test func aTaskPassPassesOverWhatWentSinceItRead() async throws {
        try await withApp { daemon in
            let now = daemon.clock.now
            let request = TaskRequest(identifier: Self.processing, kind: .processing, requiresExternalPower: true)
            try await daemon.store.submitTaskRequest(request, for: here, now: now)
            let cancelled = TaskRequest(identifier: Self.refresh, kind: .processing)
            try await daemon.daemon.taskDispatcher.start(
                [
                    PendingTaskRequest(app: gone, request: request, submittedAt: now),
                    PendingTaskRequest(app: here, request: cancelled, submittedAt: now),
                    PendingTaskRequest(app: here, request: request, submittedAt: now),
                ], slots: 2)
            #expect(try await daemon.store.runningTasks().map(\.identifier) == [Self.processing])
        }
    }
}
