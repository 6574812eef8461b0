import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// An app's state follows its process, and its pid is the kernel's word: a foreground app that
/// exits is no longer `active` (and stops holding processing tasks back), and a report naming a
/// process that is not the caller's changes nothing (issue 14, item 4).
@Suite(.timeLimit(.minutes(5)))
struct ProcessIdentityTests {
    static let app = "com.example.identity"

    /// `curl` reporting a state over the socket with the app's token; `exec` makes the
    /// reported pid (`$$`) curl's own.
    func report(_ state: String, pid: String = "", token: String, socket: String) throws -> Spawned {
        try Spawned(
            "/bin/sh",
            [
                "-c",
                #"exec curl -s --unix-socket "$1" -H "Authorization: Bearer $2" -H 'Content-Type: application/json' -d "{\"state\":\"$3\",\"processID\":${4:-$$}}" http://bgd/v1/app/state"#,
                "sh", socket, token, state, pid,
            ])
    }

    @Test func aForegroundAppThatExitsIsNoLongerActive() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            // It says it is active, then exits without a word more.
            let reason = try await daemon.waitFor(
                { activity -> DecisionReason? in
                    if case .lifecycleChanged(let id, _, let reason?) = activity, id.rawValue == Self.app,
                        reason.code == .processExited
                    {
                        return reason
                    }
                    return nil
                },
                after: {
                    let reporter = try report("active", token: token, socket: daemon.socketPath)
                    let answer = await Command.readAll(reporter.output)
                    #expect(answer.contains(#""state":"active""#), "\(answer)")
                    _ = await reporter.waitForExit()
                })
            #expect(reason.detail.contains("was active"))
            let overview = try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self)
            #expect(overview.lifecycles.isEmpty, "no app is in the foreground any more: \(overview.lifecycles)")
        }
    }

    /// An app that asks for background time before (or without ever) saying its state is given
    /// it, but is not taken for the app the user is looking at: bgd has no process of it to
    /// watch, and an `active` that never ended held every processing task back.
    @Test func askingForBackgroundTimeDoesNotMakeAnAppActive() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            let begun = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/background-tasks", body: Data("{}".utf8), token: token)
            #expect(begun.status == 201, "\(begun)")
            let overview = try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self)
            #expect(overview.lifecycles.allSatisfy { $0.state != .active }, "\(overview.lifecycles)")
        }
    }

    /// In the foreground a background task has no deadline, so an app may hold at most
    /// `maximumBackgroundTasksPerApp` at once: one more is refused (429, saying what to do) until
    /// it ends one. Before, each stayed for as long as the process.
    @Test func anAppHoldsAtMostSoManyBackgroundTasks() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            func begin() async throws -> RawHTTP.Answer {
                try await RawHTTP.request(
                    daemon.socketPath, .POST, "/v1/app/background-tasks", body: Data(#"{"name":"n"}"#.utf8), token: token)
            }
            for _ in 0..<LifecycleSupervisor.maximumBackgroundTasksPerApp {
                let begun = try await begin()
                try #require(begun.status == 201, "\(begun)")
            }
            let refused = try await begin()
            #expect(refused.status == 429 && refused.errorCode == "tooManyBackgroundTasks", "\(refused)")
            #expect(String(decoding: refused.body, as: UTF8.self).contains("endBackgroundTask"))
            let ended = try await RawHTTP.request(
                daemon.socketPath, .DELETE, "/v1/app/background-tasks/1", token: token)
            #expect(ended.status == 204, "\(ended)")
            #expect(try await begin().status == 201)
        }
    }

    /// The same, seen from another app: its processing task waits while the first is active,
    /// and runs once that app's process has exited.
    @Test func aProcessingTaskRunsOnceTheActiveAppsProcessHasExited() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            // The fixture handles this one.
            let worker = "com.example.worker", processing = "com.example.fixture.processing"
            let registered = try await daemon.register(
                worker, command: [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"], interval: .never,
                taskIdentifiers: [processing])
            let workerApp = BackgroundApplication(
                appID: AppID(rawValue: worker)!, token: registered.token, socketPath: daemon.socketPath)
            // Active, from a process that stays: it reports its own pid over the socket, then waits on its stdin.
            let script = """
                import os, socket, sys
                s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
                body = '{"state":"active","processID":%d}' % os.getpid()
                s.sendall(('POST /v1/app/state HTTP/1.1\\r\\nHost: bgd\\r\\nAuthorization: Bearer %s\\r\\nContent-Type: application/json\\r\\n'
                           'Content-Length: %d\\r\\nConnection: close\\r\\n\\r\\n%s' % (sys.argv[2], len(body), body)).encode())
                print(s.recv(4096).decode().split(' ')[1], flush=True)
                sys.stdin.read()  # stays until the test kills it (or closes its stdin)
                """
            let reporter = try Spawned("/usr/bin/python3", ["-c", script, daemon.socketPath, token], stdin: true)
            defer { reporter.signal(SIGKILL) }
            #expect(await eventually { (try? processState(reporter.processID)) != nil })
            var active = false
            for _ in 0..<2_000 where !active {
                active =
                    try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self).lifecycles.first?.state
                    == .active
            }
            #expect(active, "the app reported itself active")
            try await workerApp.taskScheduler.submit(ProcessingTaskRequest(identifier: processing))
            let waiting = try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self).pending.first?
                .waitingReason
            #expect(waiting?.code == .appInForeground, "\(String(describing: waiting))")
            // Its process exits (no word to bgd): the task runs.
            let run = try await daemon.waitForRunEnd(of: worker) { reporter.signal(SIGKILL) }
            #expect(run.outcome == .newData && run.taskIdentifier == processing, "\(run)")
        }
    }

    @Test func aReportNamingAnotherProcessIsRefused() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            let bystander = try Spawned("/bin/sleep", ["30"])
            defer { bystander.signal(SIGKILL) }
            let attempt = try report(
                "background", pid: "\(bystander.processID)", token: token, socket: daemon.socketPath)
            let answer = await Command.readAll(attempt.output)
            _ = await attempt.waitForExit()
            #expect(answer.contains(#""error":"notYourProcess""#), "\(answer)")
            let overview = try await daemon.admin.send(.get, "/v1/tasks", as: TasksOverview.self)
            #expect(overview.lifecycles.isEmpty, "nothing changed: \(overview.lifecycles)")
            // Long past any background time and suspension delay: the sleep is never stopped.
            daemon.clock.advance(by: .seconds(120))
            #expect(try processState(bystander.processID) != "T")
        }
    }
}
