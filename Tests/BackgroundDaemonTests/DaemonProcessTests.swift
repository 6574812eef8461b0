import Background
import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// bgd as a real process: one per state directory, a clean stop on SIGTERM, and nothing lost or
/// doubled when it is killed with SIGKILL in the middle of a fetch.
@Suite(.timeLimit(.minutes(5)), .serialized)
struct DaemonProcessTests {
    @Test func aSecondBgdOnTheSameStateRefusesToStart() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try await DaemonProcess(stateDirectory: directory + "/state", socketPath: directory + "/bgd.sock")
        let second = try await Command.run(
            try BuiltProducts.path(of: "bgd"),
            ["--state-dir", directory + "/state", "--socket", directory + "/other.sock"])
        #expect(second.status == 75)
        #expect(second.standardError.contains("another bgd (pid \(first.processID)) is using the state directory"))
        // The first still serves.
        let status = try await DaemonClient(socketPath: first.socketPath).send(
            .get, "/v1/status", as: DaemonStatus.self)
        #expect(status.processID == first.processID)
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0)
    }

    /// A state directory or a socket directory bgd cannot make is said in the system's words,
    /// with its path — not as Foundation's error dump.
    @Test func aDirectoryBgdCannotMakeIsSaidPlainly() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = directory + "/a-file"
        FileManager.default.createFile(atPath: file, contents: Data())
        for (arguments, path) in [
            (["--state-dir", file + "/state", "--socket", directory + "/bgd.sock"], file + "/state"),
            (["--state-dir", directory + "/state", "--socket", file + "/run/bgd.sock"], file + "/run"),
        ] {
            let refused = try await Command.run(try BuiltProducts.path(of: "bgd"), arguments + ["--push-port", "off"])
            #expect(
                refused.status == 1 && refused.standardError.contains("cannot use \(path): Not a directory")
                    && !refused.standardError.contains("Error Domain"), "\(refused)")
        }
    }

    /// A `--socket` in a directory that was there: the directory keeps its mode (bgd made it
    /// 0700, even $HOME, or /tmp as root); one anybody may write to without the sticky bit is
    /// refused. An operator token file others could read is replaced by a new token; one another
    /// user made is refused (they may know it).
    @Test func aSocketsDirectoryAndTokenAreTrustedOnlyAsBgdsUsers() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let shared = directory + "/shared"
        #expect(mkdir(shared, 0o755) == 0 && chmod(shared, 0o755) == 0)
        let socket = shared + "/bgd.sock"
        let token = socket + ".operator-token"
        func mode(_ path: String) -> mode_t {
            var info = stat()
            return stat(path, &info) == 0 ? info.st_mode & 0o7777 : 0
        }
        func start() async throws -> String {
            let daemon = try await DaemonProcess(stateDirectory: directory + "/state", socketPath: socket)
            daemon.signal(SIGTERM)
            #expect(await daemon.waitForExit() == 0)
            return try String(contentsOfFile: token, encoding: .utf8)
        }
        let first = try await start()
        #expect(mode(shared) == 0o755, "the directory keeps its mode")
        #expect(mode(token) == 0o600)

        #expect(chmod(token, 0o644) == 0)
        let second = try await start()
        #expect(second != first && mode(token) == 0o600, "a token others could read is replaced")
        #expect(try await start() == second, "and then kept")

        if geteuid() == 0 {  // only root may give the file to another user (here and in CI)
            #expect(chown(token, 65534, 65534) == 0)
            let squatted = try await Command.run(
                try BuiltProducts.path(of: "bgd"),
                ["--state-dir", directory + "/state", "--socket", socket, "--push-port", "off"])
            #expect(
                squatted.status == 1 && squatted.standardError.contains("belongs to user 65534, not to bgd's"),
                "\(squatted)")
        }

        let open = directory + "/open"
        #expect(mkdir(open, 0o777) == 0 && chmod(open, 0o777) == 0)
        let refused = try await Command.run(
            try BuiltProducts.path(of: "bgd"),
            ["--state-dir", directory + "/state", "--socket", open + "/bgd.sock", "--push-port", "off"])
        #expect(
            refused.status == 1 && refused.standardError.contains("anybody may write to it"), "\(refused)")
    }

    /// What is at bgd's paths and is not its own is refused, and left as it was: a state
    /// directory or a lock file another user owns (they could swap the database, or hold bgd off
    /// for good), a lock that is a symbolic link (bgd truncated what it pointed at), and a file
    /// at the socket's path that is not a socket (a mistyped --socket deleted it).
    @Test func pathsThatAreNotBgdsOwnAreRefusedAndLeftAlone() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        func bgd(state: String = "state", socket: String = "bgd.sock") async throws -> Command.Output {
            try await Command.run(
                try BuiltProducts.path(of: "bgd"),
                ["--state-dir", directory + "/" + state, "--socket", directory + "/" + socket, "--push-port", "off"])
        }
        let notes = directory + "/notes.txt"
        try Data("mine\n".utf8).write(to: URL(fileURLWithPath: notes))
        let mistyped = try await bgd(socket: "notes.txt")
        #expect(mistyped.status == 1 && mistyped.standardError.contains("is not a socket"), "\(mistyped)")
        #expect(try String(contentsOfFile: notes, encoding: .utf8) == "mine\n", "the file is left")

        #expect(symlink(notes, directory + "/linked.sock.lock") == 0)
        let linked = try await bgd(socket: "linked.sock")
        #expect(linked.status == 1 && linked.standardError.contains("symbolic link"), "\(linked)")
        #expect(try String(contentsOfFile: notes, encoding: .utf8) == "mine\n", "not truncated through the link")

        guard geteuid() == 0 else { return }  // only root may give a path to another user (here and in CI)
        #expect(mkdir(directory + "/theirs", 0o700) == 0 && chown(directory + "/theirs", 65534, 65534) == 0)
        let theirs = try await bgd(state: "theirs")
        #expect(
            theirs.status == 1 && theirs.standardError.contains("belongs to user 65534, not to bgd's"), "\(theirs)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/theirs/bgd.sqlite"))

        let squatted = directory + "/squatted.sock.lock"
        #expect(FileManager.default.createFile(atPath: squatted, contents: nil) && chown(squatted, 65534, 65534) == 0)
        let held = try await bgd(socket: "squatted.sock")
        #expect(held.status == 1 && held.standardError.contains("not a file of bgd's user's"), "\(held)")
    }

    /// Another state directory but the same socket: refused, and the first bgd's socket is
    /// neither bound over nor unlinked (probe D7).
    @Test func aSecondBgdOnTheSameSocketRefusesToStartAndLeavesItAlone() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let first = try await DaemonProcess(stateDirectory: directory + "/state", socketPath: directory + "/bgd.sock")
        let second = try await Command.run(
            try BuiltProducts.path(of: "bgd"),
            ["--state-dir", directory + "/other-state", "--socket", directory + "/bgd.sock"])
        #expect(second.status == 75)
        #expect(
            second.standardError.contains(
                "another bgd (pid \(first.processID)) serves the socket \(directory)/bgd.sock"))
        #expect(FileManager.default.fileExists(atPath: directory + "/bgd.sock"))
        let status = try await DaemonClient(socketPath: first.socketPath).send(
            .get, "/v1/status", as: DaemonStatus.self)
        #expect(status.processID == first.processID)
        first.signal(SIGTERM)
        #expect(await first.waitForExit() == 0)
        #expect(
            !FileManager.default.fileExists(atPath: directory + "/bgd.sock"),
            "the owner removes its socket when it stops")
    }

    @Test func sigtermStopsCleanlyAndTheStoreIsSound() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let daemon = try await DaemonProcess(stateDirectory: directory + "/state", socketPath: directory + "/bgd.sock")
        let admin = DaemonClient(socketPath: daemon.socketPath)
        _ = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: "com.example.a")!, launchCommand: LaunchCommand(["/bin/true"])!,
                fetchInterval: .minimum),
            as: RegisteredApp.self)
        // An app holds its event stream open: the stop must not wait on it.
        let registered = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: "com.example.b")!, launchCommand: LaunchCommand(["/bin/true"])!),
            as: RegisteredApp.self)
        let stream = try await DaemonClient(socketPath: daemon.socketPath, token: registered.token).stream(
            "/v1/app/events")
        var messages = stream.makeAsyncIterator()
        _ = try await messages.next()
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit() == 0)
        #expect(try await messages.next() == nil, "the app's stream ended with bgd")
        #expect(!FileManager.default.fileExists(atPath: daemon.socketPath), "the socket is removed")
        let store = try BackgroundStore.open(atPath: directory + "/state/bgd.sqlite")
        #expect(try await store.integrityCheck() == "ok")
        #expect(try await store.apps().map(\.id.rawValue) == ["com.example.a", "com.example.b"])
    }

    /// An open dashboard tab holds `/events` (server-sent events) open: the stop must not wait on
    /// it. Before, bgd waited for the tab forever, and systemd killed it at TimeoutStopSec.
    /// (A long-poll's: `LongPollTests`.)
    @Test func sigtermStopsWhileADashboardTabIsOpen() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let port = try freeLoopbackPort()
        let daemon = try await DaemonProcess(
            stateDirectory: directory + "/state", socketPath: directory + "/bgd.sock",
            arguments: ["--http", "127.0.0.1:\(port)"])
        let token = try ObservabilityTests.dashboardToken(inState: directory + "/state")
        let tab = try Spawned(
            "/usr/bin/env",
            ["curl", "-sN", "-H", "Authorization: Bearer \(token)", "http://127.0.0.1:\(port)/events"])
        let page = OutputWatcher(tab.output)
        #expect(await page.wait(for: ": bgd"), "the tab's stream did not open: \(page.text)")
        daemon.signal(SIGTERM)
        let stopped = waitUntilGone(daemon.processID, timeoutMilliseconds: 30_000)
        #expect(stopped, "bgd still runs 30 s after SIGTERM, waiting on the open tab")
        if !stopped { daemon.signal(SIGKILL) }
        #expect(await daemon.waitForExit() == 0)
        #expect(await tab.waitForExit() == 0, "the tab's stream did not end with bgd")
    }

    @Test func killDashNineDuringAFetchLosesAndDoublesNothing() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let state = directory + "/state"
        let socket = directory + "/bgd.sock"
        let arguments = ["--fetch-budget", "20s", "--expiration-lead", "2s", "--kill-grace", "1s"]
        let app = "com.example.crashsafe"
        let fixture = try BuiltProducts.path(of: "bgd-fixture-app")

        // A fetch is in flight: the app was launched for run 1 and hangs in its handler.
        let first = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        var admin = DaemonClient(socketPath: socket)
        _ = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: app)!, launchCommand: LaunchCommand([fixture, "hang-run", "1"])!,
                fetchInterval: .minimum),
            as: RegisteredApp.self)
        let run = try await admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
        #expect(run.id == RunID(1))
        let orphan = try #require(run.processID)

        // bgd dies at once, no chance to clean up.
        first.signal(SIGKILL)
        #expect(await first.waitForExit() == SIGKILL)

        // Restart: the interrupted run is recorded as such, and its orphaned app is ended.
        let second = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        admin = DaemonClient(socketPath: socket)
        let interrupted = try await admin.send(.get, "/v1/runs/1", as: RunRecord.self)
        #expect(interrupted.outcome == .interrupted)
        #expect(waitUntilGone(orphan), "the app process bgd left behind is ended")

        // The app is scheduled again at once, and this time answers.
        let rerun = try await admin.send(.get, "/v1/runs/2?wait=60", as: RunRecord.self)
        #expect(rerun.trigger == .scheduled)
        #expect(rerun.reasons.map(\.code).contains(.interruptedRun))
        #expect(rerun.outcome == .newData)

        // One event per run, each closed once; the app saw each run exactly once.
        let outbox = try await admin.send(.get, "/v1/apps/\(app)/events", as: [OutboxEntry].self)
        #expect(outbox.map(\.event.seq.rawValue) == [1, 2])
        #expect(outbox.allSatisfy { $0.closedAt != nil })
        let log = try String(contentsOfFile: state + "/containers/\(app)/fixture.log", encoding: .utf8)
        let fetches = log.split(separator: "\n").filter { $0.hasPrefix("fetch") }.map { $0.split(separator: " ")[1] }
        #expect(fetches.count <= 2 && Set(fetches).count == fetches.count, "no run delivered twice: \(fetches)")
        #expect(fetches.contains("2"))

        second.signal(SIGTERM)
        #expect(await second.waitForExit() == 0)
        #expect(try await BackgroundStore.open(atPath: state + "/bgd.sqlite").integrityCheck() == "ok")
    }
}
