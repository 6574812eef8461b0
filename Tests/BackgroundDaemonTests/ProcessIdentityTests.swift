import Background
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
@Suite(.timeLimit(.minutes(2)))
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
            let reason = try await daemon.waitFor({ activity -> DecisionReason? in
                if case .lifecycleChanged(let id, _, let reason?) = activity, id.rawValue == Self.app, reason.code == .processExited { return reason }
                return nil
            }, after: {
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

    @Test func aReportNamingAnotherProcessIsRefused() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/false"], interval: .never).token
            let bystander = try Spawned("/bin/sleep", ["30"])
            defer { bystander.signal(SIGKILL) }
            let attempt = try report("background", pid: "\(bystander.processID)", token: token, socket: daemon.socketPath)
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
