import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundPolicy
import BackgroundTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// Apps that overrun, crash, exit, or cannot start: each gets a recorded outcome, and the
/// scheduler wakes them less often with a stated reason. Time moves only by the virtual clock.
@Suite(.timeLimit(.minutes(5)))
struct BudgetEnforcementTests {
    let budget = RunBudget(budget: .seconds(30), expirationLead: .seconds(5), killGrace: .seconds(5))

    func fixture(_ arguments: String...) throws -> [String] {
        [try BuiltProducts.path(of: "bgd-fixture-app")] + arguments
    }

    /// Starts a run and waits until bgd has launched the app's process.
    func startLaunchedRun(_ daemon: TestDaemon, _ app: String) async throws -> RunRecord {
        var run: RunRecord?
        _ = try await daemon.waitFor({ if case .processLaunched = $0 { () } else { nil } }) {
            run = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
        }
        return try #require(run)
    }

    func fixtureLog(_ daemon: TestDaemon, _ app: String) -> [String] {
        let path = daemon.directory + "/state/containers/\(app)/fixture.log"
        return ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test func aHangingAppIsExpiredKilledAndWokenLessOften() async throws {
        try await TestDaemon.with(budget: budget) { daemon in
            let app = "com.example.hang"
            try await daemon.register(app, command: try fixture("hang", "ignore-term"), interval: .minimum)
            let run = try await startLaunchedRun(daemon, app)
            let pid = try #require(try await daemon.store.run(run.id)?.processID)
            try await daemon.waitUntilConnected(app)

            // Five seconds before the deadline, the app is warned.
            _ = try await daemon.waitFor({ if case .expirationWarned(_, run.id) = $0 { () } else { nil } }) {
                daemon.clock.advance(by: .seconds(25))
            }

            // At the deadline: recorded as expired, SIGTERM (which this app ignores).
            let expired = try await daemon.waitForRunEnd(of: app) { daemon.clock.advance(by: .seconds(5)) }
            #expect(expired.outcome == .expired)
            #expect(expired.detail == "no answer within the 30s budget")
            #expect(expired.endedAt == run.startedAt.addingTimeInterval(30))
            #expect(try processState(pid) != nil, "still alive: it ignores SIGTERM")

            // After the grace period: SIGKILL.
            let status = try await daemon.waitFor({ activity -> BackgroundDaemon.ExitStatus? in
                if case .processExited(_, let exited, let status) = activity, exited == pid { return status }
                return nil
            }) { daemon.clock.advance(by: .seconds(5)) }
            #expect(status == .signalled(SIGKILL))

            // The next wake is delayed, and says why.
            let next = try await daemon.plannedWake(of: app)
            #expect(next == run.startedAt.addingTimeInterval(30 * 60))
            let why = try await daemon.why(app)
            #expect(why.reasons.map(\.code) == [.systemFloor, .penaltyAfterOverrun])
            #expect(fixtureLog(daemon, app).filter { $0.hasPrefix("fetch") }.count <= 1, "one run, one fetch at most")
        }
    }

    @Test func expirationCancelsTheHandlerAndReachesTheDelegate() async throws {
        try await TestDaemon.with(budget: budget) { daemon in
            let app = "com.example.polite"
            try await daemon.register(app, command: try fixture("cooperate"), interval: .minimum)
            let run = try await startLaunchedRun(daemon, app)
            // The fixture connects and starts its handler; only then does the warning matter.
            try await daemon.waitUntilConnected(app)
            let ended = try await daemon.waitForRunEnd(of: app) { daemon.clock.advance(by: .seconds(25)) }
            // The handler saw cancellation and answered .failed before the deadline.
            #expect(ended.outcome == .failed)
            #expect(ended.endedAt! < run.deadline)
            #expect(fixtureLog(daemon, app).contains("expire"))
            // Having answered, the app is told to exit, and does.
            let pid = try #require(try await daemon.store.run(run.id)?.processID)
            try await daemon.waitUntil { try processState(pid) == nil }
        }
    }

    @Test func anAppThatLingersAfterAnsweringIsEnded() async throws {
        try await TestDaemon.with(budget: budget) { daemon in
            let app = "com.example.linger"
            try await daemon.register(app, command: try fixture("linger"), interval: .minimum)
            let run = try await daemon.waitForRunEnd(of: app) {
                _ = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
            }
            #expect(run.outcome == .newData)
            let pid = try #require(try await daemon.store.run(run.id)?.processID)
            #expect(try processState(pid) != nil, "told to exit, it stays")
            let status = try await daemon.waitFor({ activity -> BackgroundDaemon.ExitStatus? in
                if case .processExited(_, pid, let status) = activity { return status }
                return nil
            }) { daemon.clock.advance(by: .seconds(5)) }
            #expect(status == .signalled(SIGTERM))
        }
    }

    @Test func anAppThatCrashesMidFetchIsRecordedAsCrashed() async throws {
        try await TestDaemon.with(budget: budget) { daemon in
            let app = "com.example.crash"
            try await daemon.register(app, command: try fixture("crash"), interval: .minimum)
            let ended = try await daemon.waitForRunEnd(of: app) {
                _ = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
            }
            #expect(ended.outcome == .crashed)
            #expect(ended.detail?.contains("SIGABRT") == true, "\(ended.detail ?? "")")
            _ = try await daemon.plannedWake(of: app)
            let why = try await daemon.why(app)
            #expect(why.reasons.map(\.code).contains(.backoffAfterFailure))
        }
    }

    @Test func aCommandThatExitsAtOnceIsRecorded() async throws {
        try await TestDaemon.with(budget: budget) { daemon in
            try await daemon.register("com.example.exit", command: try fixture("exit"), interval: .minimum)
            let ended = try await daemon.waitForRunEnd(of: "com.example.exit") {
                _ = try await daemon.admin.send(.post, "/v1/apps/com.example.exit/fetch", as: RunRecord.self)
            }
            #expect(ended.outcome == .crashed)
            #expect(ended.detail == "the app exited with status 0 before answering")
        }
    }

    @Test func aCommandThatNoLongerExistsIsRecordedAsLaunchFailed() async throws {
        try await TestDaemon.with(budget: budget) { daemon in
            let copy = daemon.directory + "/vanishing-app"
            try FileManager.default.copyItem(atPath: try BuiltProducts.path(of: "bgd-fixture-app"), toPath: copy)
            try await daemon.register("com.example.gone", command: [copy], interval: .minimum)
            try FileManager.default.removeItem(atPath: copy)
            let run = try await daemon.admin.send(.post, "/v1/apps/com.example.gone/fetch?wait=0", as: RunRecord.self)
            let ended = try await daemon.store.run(run.id)
            #expect(ended?.outcome == .launchFailed)
            #expect(ended?.detail?.contains("No such file") == true, "\(ended?.detail ?? "")")
        }
    }

    @Test func answeringAfterTheDeadlineChangesNothing() async throws {
        try await TestDaemon.with(budget: budget) { daemon in
            let registered = try await daemon.register("com.example.late", command: ["/bin/false"], interval: .minimum)
            let client = DaemonClient(socketPath: daemon.socketPath, token: registered.token)
            let stream = try await client.stream("/v1/app/events")
            var messages = stream.makeAsyncIterator()
            _ = try await messages.next()  // hello
            let run = try await daemon.admin.send(.post, "/v1/apps/com.example.late/fetch", as: RunRecord.self)
            _ = try await daemon.waitForRunEnd(of: "com.example.late") { daemon.clock.advance(by: .seconds(30)) }
            await #expect(throws: BackgroundError.api(status: 409, code: "runAlreadyEnded", reason: "")) {
                _ = try await client.send(
                    .post, "/v1/app/runs/\(run.id)/result", body: FetchResultReport(result: .newData),
                    as: RunRecord.self)
            }
            #expect(try await daemon.store.run(run.id)?.outcome == .expired)
        }
    }
}

/// The state letter of a process from /proc (R, S, T, Z, …), nil when it is gone.
func processState(_ pid: Int32) throws -> Character? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return nil }
    let state = stat[stat.index(close, offsetBy: 2)]
    return state == "Z" || state == "X" ? nil : state
}
