import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A bgd killed while an app is suspended must not leave it frozen (or stopped) for ever: the
/// next bgd thaws it (and only it: its own cgroup, or the pid's start time must match).
@Suite(.timeLimit(.minutes(5)))
struct LifecycleCrashTests {
    /// Each test's own (Swift Testing makes a new instance per test): bgd's state and socket,
    /// kept across the killed bgd and the next.
    let directory = TemporaryDirectory.make()
    var state: String { directory + "/state" }
    var socket: String { directory + "/bgd.sock" }

    /// `nextWithoutCgroups`: the next bgd does not find the killed one's cgroups (started with
    /// `--app-cgroups off`, as from another terminal's scope): the app's frozen group is thawed
    /// all the same. Before, it was sent SIGCONT only, which does not thaw a freezer.
    @Test(arguments: [false, true])
    func theNextBgdContinuesAnAppAKilledOneHadSuspended(nextWithoutCgroups: Bool) async throws {
        if nextWithoutCgroups && !CgroupProbe.available { return }  // frozen by a cgroup, or nothing to see
        let arguments = ["--suspension-delay", "0.05s", "--conditions", "unconstrained"]
        var daemon: DaemonProcess? = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, arguments: arguments)
        let admin = DaemonClient(socketPath: socket)
        let app = "com.example.suspended"
        let token = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(id: AppID(rawValue: app)!, launchCommand: LaunchCommand(["/bin/false"])!),
            as: RegisteredApp.self
        ).token
        let log = directory + "/app.log"
        // The app starts where the test runs; bgd moves it into a cgroup of its own.
        let ownGroup = CgroupProbe.available ? CgroupProbe.directory(of: getpid()) : nil
        let process = try launchForegroundApp(app, token: token, socket: socket, log: log, mode: "idle", in: directory)
        defer { process.signalGroup(SIGKILL) }
        // Real time here (a real bgd, 50 ms of suspension delay): ask bgd until it has stopped the app.
        var suspended = false
        for _ in 0..<5_000 where !suspended {
            let status = try await admin.send(.get, "/v1/apps", as: [AppSummary].self).first?.lifecycle
            suspended = status?.state == .suspended && isSuspended(process.processID)
        }
        #expect(suspended, "the app was suspended")
        if nextWithoutCgroups { #expect(CgroupProbe.isFrozen(process.processID), "frozen by its cgroup") }
        daemon?.signal(SIGKILL)
        _ = await daemon?.waitForExit()
        daemon = nil
        #expect(isSuspended(process.processID), "still suspended: nobody thawed it")
        let next = try await DaemonProcess(
            stateDirectory: state, socketPath: socket,
            arguments: arguments + (nextWithoutCgroups ? ["--app-cgroups", "off"] : []))
        // Thawed: it runs, so it connects again and says its state to the new bgd (which may
        // well suspend it again 50 ms later — that is a new suspension, its own to undo).
        var reported = false
        for _ in 0..<5_000 where !reported {
            reported =
                (try? await admin.send(.get, "/v1/apps", as: [AppSummary].self).first?.lifecycle?.processID)
                == process.processID
        }
        #expect(reported, "the next bgd thawed it: it connected again and reported its state")
        next.signal(SIGTERM)
        _ = await next.waitForExit()
        // Given back the cgroup it came from, though the bgd that took it from there was killed,
        // and nothing of bgd's is left around it.
        if nextWithoutCgroups {
            #expect(!CgroupProbe.isFrozen(process.processID), "thawed though the next bgd holds no cgroups")
        } else if let ownGroup {
            #expect(CgroupProbe.directory(of: process.processID) == ownGroup)
            #expect(access(ownGroup + "/bgd-" + AppCgroups.instance(of: state), F_OK) != 0, "bgd's groups are gone")
            #expect(
                ((try? FileManager.default.contentsOfDirectory(atPath: state + "/cgroup-origins")) ?? []).isEmpty,
                "nothing is left to give back")
        }
    }

    /// A bgd killed while an app it launched runs (with a grandchild in a session of its own that
    /// ignores SIGTERM): the next bgd ends the whole leftover cgroup, grandchild included.
    @Test func theNextBgdEndsEverythingAKilledOneLaunched() async throws {
        guard CgroupProbe.available else { return }
        let arguments = ["--conditions", "unconstrained"]
        var daemon: DaemonProcess? = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, arguments: arguments)
        let admin = DaemonClient(socketPath: socket)
        let app = "com.example.orphaned"
        let fixture = try BuiltProducts.path(of: "bgd-fixture-app")
        let script = "setsid sh -c 'trap \"\" TERM; exec sleep 1000' & echo $! > grandchild.pid; exec '\(fixture)' hang"
        _ = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: app)!, launchCommand: LaunchCommand(["/bin/sh", "-c", script])!),
            as: RegisteredApp.self)
        let run = try await admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
        let pidFile = state + "/containers/\(app)/grandchild.pid"
        let text = try await writtenLine(pidFile)
        let grandchild = try #require(Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)))
        defer { kill(grandchild, SIGKILL) }
        let group = try #require(CgroupProbe.directory(of: grandchild))
        let launched = try #require(
            try await admin.send(.get, "/v1/apps/\(app)/history", as: [RunRecord].self).first { $0.id == run.id }?
                .processID)
        daemon?.signal(SIGKILL)
        _ = await daemon?.waitForExit()
        daemon = nil
        #expect(
            ((try? processState(grandchild)) ?? nil) != nil && ((try? processState(launched)) ?? nil) != nil,
            "both outlive the killed bgd")
        let next = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        #expect(
            await eventually { ((try? processState(grandchild)) ?? nil) == nil }, "the next bgd ended the grandchild")
        #expect(await eventually { ((try? processState(launched)) ?? nil) == nil }, "and the app")
        #expect(await eventually { access(group, F_OK) != 0 }, "and removed the cgroup")
        next.signal(SIGTERM)
        _ = await next.waitForExit()
    }

    /// Without cgroups, a bgd killed after it started a run's process and before it recorded the
    /// pid (failpoint `run.afterLaunch`) leaves a process nobody knows the pid of: the next bgd
    /// finds it — and a grandchild in a session of its own — by the run in their environment.
    @Test func theNextBgdEndsAProcessAKilledOneStartedButNeverRecorded() async throws {
        let arguments = ["--conditions", "unconstrained", "--app-cgroups", "off"]
        var daemon: DaemonProcess? = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, arguments: arguments,
            environment: ["BGD_FAILPOINT": "run.afterLaunch:once"])
        let admin = DaemonClient(socketPath: socket)
        let app = "com.example.unrecorded"
        // Neither talks to bgd: an app that does may leave by itself once bgd is gone.
        let script =
            "echo $$ > app.pid; setsid sh -c 'trap \"\" TERM; exec sleep 1000' & echo $! > grandchild.pid; exec sleep 1001"
        _ = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: app)!, launchCommand: LaunchCommand(["/bin/sh", "-c", script])!),
            as: RegisteredApp.self)
        _ = try? await admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
        _ = await daemon?.waitForExit()  // the failpoint ended it, as a kill -9 would
        daemon = nil
        func pid(in file: String) async throws -> Int32 {
            let text = try await writtenLine(state + "/containers/\(app)/" + file)
            return try #require(Int32(text.trimmingCharacters(in: .whitespacesAndNewlines)))
        }
        let launched = try await pid(in: "app.pid")
        let grandchild = try await pid(in: "grandchild.pid")
        defer {
            kill(-launched, SIGKILL)
            kill(grandchild, SIGKILL)
        }
        #expect(
            ((try? processState(grandchild)) ?? nil) != nil && ((try? processState(launched)) ?? nil) != nil,
            "both outlive the killed bgd")
        let next = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        #expect(await eventually { ((try? processState(launched)) ?? nil) == nil }, "the next bgd ended the app")
        #expect(await eventually { ((try? processState(grandchild)) ?? nil) == nil }, "and its grandchild")
        let history = try await admin.send(.get, "/v1/apps/\(app)/history", as: [RunRecord].self)
        #expect(history.map(\.outcome) == [.interrupted])
        #expect(history.first?.processID == nil, "the pid was never recorded")
        next.signal(SIGTERM)
        _ = await next.waitForExit()
    }

    /// The line a launched app's shell writes to `path`, once it is whole.
    func writtenLine(_ path: String) async throws -> String {
        let read = { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }
        try #require(await eventually { read().hasSuffix("\n") }, "\(path) was written")
        return read()
    }
}
