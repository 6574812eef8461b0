import BackgroundModel
import BackgroundTesting
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Seed 002's sample: pull-to-refresh inserts dishes; leaving the foreground saves the list
/// inside a finite-length task; a background fetch while away adds dishes; coming back reloads
/// the list with them highlighted.
@Suite(.timeLimit(.minutes(5)))
struct DeliciousFoodTests {
    static let app = "com.example.deliciousfood"

    final class Output: Sendable {
        private let text = Mutex("")
        func append(_ data: Data) { text.withLock { $0 += String(decoding: data, as: UTF8.self) } }
        var all: String { text.withLock { $0 } }
    }

    @Test func theListSavesInTheBackgroundAndReloadsOnReturn() async throws {
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register(
                Self.app, command: [try BuiltProducts.path(of: "DeliciousFood")], interval: .minimum,
                taskIdentifiers: ["com.example.deliciousfood.refresh"])
            var environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("BGD_") }
            environment[LaunchEnvironment.token] = registered.token
            environment[LaunchEnvironment.socket] = daemon.socketPath
            let process = try Spawned(
                try BuiltProducts.path(of: "DeliciousFood"), [], environment: environment, stdin: true,
                mergeErrors: true)
            let printed = Output()
            process.output.readabilityHandler = { printed.append($0.availableData) }
            defer {
                process.output.readabilityHandler = nil
                process.signal(SIGTERM)
            }
            func say(_ line: String) { process.input?.write(Data((line + "\n").utf8)) }

            #expect(await eventually { printed.all.contains("no dishes yet") }, "\(printed.all)")
            say("refresh")
            #expect(await eventually { printed.all.contains("new dishes fetched\n") }, "\(printed.all)")
            // Leaving the foreground: the list is saved with background time held, then given back.
            let ended = try await daemon.waitFor(
                { activity -> Bool? in
                    if case .backgroundTaskEnded(let app, _) = activity, app.rawValue == Self.app { return true }
                    return nil
                }, after: { say("background") })
            #expect(ended)
            #expect(await eventually { printed.all.contains("s of background time left)") }, "\(printed.all)")
            // It asked for a refresh while away, as Apple's sample does (`bgctl tasks run` has
            // something to run, as the README shows).
            let pending = try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self).pending
            #expect(
                pending.contains { $0.app.rawValue == Self.app && $0.request.identifier == "com.example.deliciousfood.refresh" },
                "\(pending)")
            // `bgctl tasks run` runs it in the app the user started: its handler is registered
            // at launch, whoever launched it.
            let task = try await daemon.waitForRunEnd(of: Self.app) {
                _ = try await daemon.admin.send(
                    .post, "/v1/tasks/run",
                    body: TaskTarget(app: AppID(rawValue: Self.app)!, identifier: "com.example.deliciousfood.refresh"),
                    as: RunRecord.self)
            }
            #expect(task.outcome == .newData, "\(task)")
            // A background fetch while away (it goes to the running app) until one brings dishes.
            var outcome: RunOutcome?
            for _ in 0..<20 where outcome != .newData {
                outcome = try await daemon.waitForRunEnd(of: Self.app) {
                    _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/fetch", as: RunRecord.self)
                }.outcome
            }
            #expect(outcome == .newData)
            // Back in the foreground: the list reloads and shows what came in, highlighted.
            let before = printed.all.count
            say("foreground")
            #expect(await eventually { printed.all.dropFirst(before).contains("← new") }, "\(printed.all)")
            let states = try await daemon.admin.send(.get, "/v1/apps", as: [AppSummary].self).first {
                $0.id.rawValue == Self.app
            }?.lifecycle?.state
            #expect(states == .active)
            say("quit")
        }
    }
}
