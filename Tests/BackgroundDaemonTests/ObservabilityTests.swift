import AsyncHTTPClient
import Background
import BackgroundDaemon
import BackgroundGateway
import BackgroundModel
import BackgroundTesting
import Foundation
import NIOCore
import NIOHTTP1
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The dashboard's door (token, one-time links, loopback), /metrics, the journal log format,
/// sd_notify readiness and the systemd unit. (The pages themselves are checked in a real
/// browser by Tests/Dashboard/run.sh.)
@Suite(.timeLimit(.minutes(5)))
struct ObservabilityTests {
    func get(
        _ url: String, headers: [(String, String)] = []
    ) async throws -> (status: Int, body: String, headers: HTTPHeaders) {
        var request = HTTPClientRequest(url: url)
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        // Redirects are looked at, not followed (the login link answers 303 with the cookie).
        let client = HTTPClient(
            eventLoopGroupProvider: .singleton, configuration: .init(redirectConfiguration: .disallow))
        defer { _ = client.shutdown() }
        // 30 s: bgd runs in this process, and in the first minute of a full `swift test` (every
        // suite starting at once on two cores) one answer took over 10.
        let response = try await client.execute(request, timeout: .seconds(30))
        let body = try await response.body.collect(upTo: 1 << 22)
        return (Int(response.status.code), String(buffer: body), response.headers)
    }

    /// The dashboard's token, as bgd wrote it for its operator in its state directory.
    static func dashboardToken(inState directory: String) throws -> String {
        try String(contentsOfFile: directory + "/dashboard-token", encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func dashboardToken(_ daemon: TestDaemon) throws -> String {
        try Self.dashboardToken(inState: daemon.directory + "/state")
    }

    @Test func theDashboardWantsItsTokenAndLoginLinksWorkOnce() async throws {
        try await TestDaemon.with(dashboard: .init(port: 0)) { daemon in
            let dashboard = try #require(daemon.daemon.dashboard)
            let port = await dashboard.boundPort.wait()
            let base = "http://127.0.0.1:\(port)"
            #expect(try await get(base + "/").status == 401)
            #expect(try await get(base + "/metrics").status == 401)
            #expect(try await get(base + "/", headers: [("Authorization", "Bearer nope")]).status == 401)
            let token = try dashboardToken(daemon)
            let permissions =
                try FileManager.default.attributesOfItem(atPath: daemon.directory + "/state/dashboard-token")[
                    .posixPermissions] as? Int
            #expect(permissions == 0o600)
            #expect(try await get(base + "/", headers: [("Authorization", "Bearer \(token)")]).status == 200)
            // Asked for by another name (DNS rebinding: a page of evil.example resolved to
            // 127.0.0.1): 421, token or not; loopback's names are answered.
            for host in ["evil.example:\(port)", "127.0.0.1.evil.example", "evil.example"] {
                let answer = try await get(base + "/", headers: [("Host", host), ("Authorization", "Bearer \(token)")])
                #expect(answer.status == 421, "\(host)")
            }
            for host in ["localhost:\(port)", "LOCALHOST", "[::1]:\(port)", "127.0.0.1"] {
                let answer = try await get(base + "/", headers: [("Host", host), ("Authorization", "Bearer \(token)")])
                #expect(answer.status == 200, "\(host)")
            }
            let login = try await daemon.admin.send(.post, "/v1/dashboard/login", as: DashboardLogin.self)
            let first = try await get(login.url)
            #expect(
                first.status == 303 && first.headers["set-cookie"].first?.contains("HttpOnly") == true,
                "\(first.status)")
            let setCookie = try #require(first.headers["set-cookie"].first)
            #expect(setCookie.contains("Max-Age=604800") && setCookie.contains("SameSite=Strict"), "\(setCookie)")
            let cookie = try #require(setCookie.split(separator: ";").first.map(String.init))
            #expect(!cookie.contains(token), "the cookie is a session, not the token")
            #expect(try await get(base + "/", headers: [("Cookie", cookie)]).status == 200)
            #expect(try await get(login.url).status == 401, "a login link works once")
            // A session forged or stretched is refused; the real one ends after 7 days.
            let (name, value) = (cookie.prefix { $0 != "=" }, cookie.drop { $0 != "=" }.dropFirst())
            let end = try #require(Int64(value.prefix { $0 != "." }))
            let stretched = "\(name)=\(end + 86400)\(value.drop { $0 != "." })"
            #expect(try await get(base + "/", headers: [("Cookie", stretched)]).status == 401)
            #expect(try await get(base + "/", headers: [("Cookie", "\(name)=\(token)")]).status == 401)
            #expect(try await get(base + "/", headers: [("Cookie", "\(name)=+\(value)")]).status == 401)
            #expect(try await get(base + "/", headers: [("Cookie", "\(name)=0\(value)")]).status == 401)
            daemon.clock.advance(by: .seconds(7 * 86400 - 60))
            #expect(try await get(base + "/", headers: [("Cookie", cookie)]).status == 200)
            daemon.clock.advance(by: .seconds(120))
            #expect(try await get(base + "/", headers: [("Cookie", cookie)]).status == 401, "a session ends")
            #expect(try await get(base + "/", headers: [("Authorization", "Bearer \(token)")]).status == 200)
        }
    }

    /// An open tab on a quiet bgd hears a comment every 30 s of bgd's clock, so a proxy in front
    /// (nginx closes a response silent for a minute) keeps it open, and TCP can find a tab whose
    /// machine went away. Before, nothing was written until bgd next did something. A tab
    /// closed takes its subscription to bgd's activity with it.
    @Test func anOpenDashboardTabHearsAKeepAliveWhileBgdIsQuiet() async throws {
        try await TestDaemon.with(dashboard: .init(port: 0)) { daemon in
            let before = daemon.activity.subscriberCount
            let port = try await #require(daemon.daemon.dashboard).boundPort.wait()
            var request = HTTPClientRequest(url: "http://127.0.0.1:\(port)/events")
            request.headers.add(name: "Authorization", value: "Bearer \(try dashboardToken(daemon))")
            let client = HTTPClient(eventLoopGroupProvider: .singleton)
            defer { _ = client.shutdown() }  // on a failure; a second shutdown only fails its future
            let response = try await client.execute(request, timeout: .seconds(30))
            #expect(response.status == .ok && response.headers["content-type"] == ["text/event-stream"])
            let (heard, body) = (Heard(), response.body)
            let reader = Task {
                for try await part in body { heard.text.withLock { $0 += String(buffer: part) } }
            }
            defer { reader.cancel() }
            func keepAlives() -> Int {
                heard.text.withLock { $0.components(separatedBy: ": keep-alive\n\n").count - 1 }
            }
            #expect(await eventually { heard.text.withLock { $0.hasPrefix(": bgd\n\n") } }, "the stream did not open")
            for expected in 1...2 {
                // The wall clock set back an hour before the second changes nothing: the period
                // is of time that passes.
                if expected == 2 { daemon.clock.jump(by: .seconds(-3600)) }
                daemon.clock.advance(by: .seconds(30))
                #expect(
                    await eventually { keepAlives() == expected }, "keep-alives heard: \(heard.text.withLock { $0 })")
            }
            #expect(daemon.activity.subscriberCount == before + 1)
            reader.cancel()
            try await client.shutdown()  // the tab closed
            #expect(
                await eventually { daemon.activity.subscriberCount == before }, "the closed tab's subscription stayed")
        }
    }

    final class Heard: Sendable { let text = Mutex("") }
    final class Tally: Sendable { let count = Mutex(0) }

    /// The overview's "wakes in 24 h" are bgd's own: a run the operator asked for spends none.
    @Test func theOverviewCountsOnlyBgdsOwnWakes() async throws {
        try await TestDaemon.with(dashboard: .init(port: 0)) { daemon in
            let app = "com.example.counted"
            try await daemon.register(
                app, command: [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"], interval: .never)
            let run = try await daemon.waitForRunEnd(of: app) {
                _ = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
            }
            #expect(run.trigger == .manual && run.outcome == .newData, "\(run)")
            let port = try await #require(daemon.daemon.dashboard).boundPort.wait()
            let token = try dashboardToken(daemon)
            let page = try await get("http://127.0.0.1:\(port)/", headers: [("Authorization", "Bearer \(token)")])
            #expect(page.body.contains("<td data-label=\"wakes in 24 h\">0"), "\(page.body)")
        }
    }

    @Test func metricsMoveWhenTheSystemActs() async throws {
        try await TestDaemon.with { daemon in
            func total(_ name: String) async throws -> Double {
                let text = try await get0(daemon)
                return text.split(separator: "\n").filter { $0.hasPrefix(name) }.compactMap {
                    $0.split(separator: " ").last.flatMap { Double($0) }
                }.reduce(0, +)
            }
            try await daemon.register("com.example.metrics", command: ["/bin/false"], interval: .never)
            let before = try await total("bgd_wakes_total")
            _ = try await daemon.waitForRunEnd(of: "com.example.metrics") {
                _ = try await daemon.admin.send(.post, "/v1/apps/com.example.metrics/fetch", as: RunRecord.self)
            }
            try await daemon.waitUntil { try await total("bgd_wakes_total") == before + 1 }
            let text = try await get0(daemon)
            #expect(
                text.contains(#"bgd_wakes_total{trigger="manual",reason="manualRequest",result="crashed"} 1"#),
                "\(text)")
            #expect(text.contains("bgd_store_commit_seconds_count") && text.contains("bgd_outbox_depth"))
            #expect(!text.contains("com.example.metrics"), "no app ids as labels")
        }
    }

    /// The operator's socket serves /metrics too, to the operator (its token from the file
    /// beside the socket, as a scraper would be given it).
    func get0(_ daemon: TestDaemon) async throws -> String {
        let token = try #require(DaemonClient.operatorToken(socketPath: daemon.socketPath))
        let output = try await Command.run(
            "/usr/bin/env",
            [
                "curl", "-s", "--unix-socket", daemon.socketPath, "-H", "Authorization: Bearer \(token)",
                "http://bgd/metrics",
            ])
        return output.standardOutput
    }

    @Test func bgdRefusesADashboardOffLoopback() async throws {
        let directory = TemporaryDirectory.make()
        let output = try await Command.run(
            try BuiltProducts.path(of: "bgd"),
            ["--http", "0.0.0.0:0", "--state-dir", directory + "/state", "--socket", directory + "/bgd.sock"])
        #expect(output.status != 0 && output.standardError.contains("loopback only"), "\(output.standardError)")
        let malformed = try await Command.run(
            try BuiltProducts.path(of: "bgd"),
            ["--http", "localhost", "--state-dir", directory + "/state", "--socket", directory + "/bgd.sock"])
        #expect(malformed.status != 0 && malformed.standardError.contains("HOST:PORT"))
    }

    /// Under systemd (JOURNAL_STREAM set) with no journald socket to take the native protocol
    /// (JournalLogTests has that), each line on stderr carries a syslog priority and key=value
    /// metadata.
    @Test func logsSpeakTheJournalsFormUnderSystemd() async throws {
        let directory = TemporaryDirectory.make()
        let daemon = try await DaemonProcess(
            stateDirectory: directory + "/state", socketPath: directory + "/bgd.sock",
            environment: ["JOURNAL_STREAM": "8:1234", "BGD_JOURNAL_SOCKET": directory + "/no-journald"])
        let line = try #require(daemon.startupLog.split(separator: "\n").first { $0.contains("bgd is ready") })
        #expect(line.hasPrefix("<5>bg.daemon: bgd is ready socket=\(directory)/bgd.sock"), "\(line)")
        daemon.signal(SIGTERM)
        _ = await daemon.waitForExit()
    }

    /// A bgd started as systemd starts a Type=notify service: `NOTIFY_SOCKET` (and what else is
    /// given) in its environment, the socket's datagrams recorded.
    func startedAsSystemdWould(
        _ environment: [String: String]
    ) async throws
        -> (directory: String, notify: DatagramListener, daemon: DaemonProcess)
    {
        let directory = TemporaryDirectory.make()
        let path = directory + "/notify.sock"
        let notify = try DatagramListener(path: path)
        let daemon = try await DaemonProcess(
            stateDirectory: directory + "/state", socketPath: directory + "/bgd.sock",
            environment: environment.merging(["NOTIFY_SOCKET": path]) { $1 })
        return (directory, notify, daemon)
    }

    /// Type=notify, as systemd's conventions go: READY=1 with a STATUS= once bgd serves,
    /// WATCHDOG=1 at half the interval systemd gives (WATCHDOG_USEC), STOPPING=1 on SIGTERM.
    @Test func bgdTellsSystemdItIsReadyAliveAndStopping() async throws {
        let (directory, notify, daemon) = try await startedAsSystemdWould(["WATCHDOG_USEC": "1000000"])
        let ready = await notify.record(within: 10) { $0.hasPrefix("READY=1") }
        #expect(ready?.contains("STATUS=0 apps; serving on \(directory)/bgd.sock") == true, "\(ready ?? "no READY=1")")
        // Two pings: the watchdog keeps going (every 0.5 s here).
        for _ in 0..<2 {
            #expect(await notify.record(within: 5) { $0 == "WATCHDOG=1" } != nil, "no WATCHDOG=1")
        }
        daemon.signal(SIGTERM)
        #expect(await notify.record(within: 10) { $0.hasPrefix("STOPPING=1") } != nil, "no STOPPING=1")
        #expect(await daemon.waitForExit() == 0)
    }

    /// What systemd told bgd is bgd's: an app it launches does not inherit the notify socket or
    /// the watchdog (an app using sd_notify would have systemd log a refused message at each
    /// launch, or with NotifyAccess=all speak for bgd), nor bgd's invocation, directories or
    /// credentials (an app would have written in bgd's state and read its secrets).
    @Test func anAppBgdLaunchesDoesNotInheritWhatSystemdToldBgd() async throws {
        let journald = TemporaryDirectory.make() + "/no-journald"
        let (directory, notify, daemon) = try await startedAsSystemdWould([
            "WATCHDOG_USEC": "60000000", "INVOCATION_ID": "0123456789abcdef", "JOURNAL_STREAM": "8:1234",
            "BGD_JOURNAL_SOCKET": journald, "CREDENTIALS_DIRECTORY": "/run/credentials/bgd.service",
            "STATE_DIRECTORY": "/var/lib/bgd", "RUNTIME_DIRECTORY": "/run/bgd", "LANG": "C.UTF-8",
        ])
        #expect(await notify.record(within: 10) { $0.hasPrefix("READY=1") } != nil)
        let admin = DaemonClient(socketPath: directory + "/bgd.sock")
        let app = "com.example.env"
        _ = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: app)!,
                launchCommand: LaunchCommand([
                    "/bin/sh", "-c",
                    #"env > "$BGD_CONTAINER/env.tmp" && mv "$BGD_CONTAINER/env.tmp" "$BGD_CONTAINER/env""#,
                ])!,
                fetchInterval: .never),
            as: RegisteredApp.self)
        _ = try await admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
        let file = directory + "/state/containers/\(app)/env"
        #expect(await eventually { FileManager.default.fileExists(atPath: file) }, "the app ran")
        let names = Set(
            (try String(contentsOfFile: file, encoding: .utf8)).split(separator: "\n").map {
                String($0.prefix { $0 != "=" })
            })
        #expect(names.contains("BGD_APP_ID") && names.contains("PATH"), "\(names)")
        for name in [
            "NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM", "INVOCATION_ID",
            "CREDENTIALS_DIRECTORY",
            "STATE_DIRECTORY", "RUNTIME_DIRECTORY",
        ] {
            #expect(!names.contains(name), "\(name) reached the app")
        }
        #expect(names.contains("LANG"), "the rest of bgd's environment is the app's")
        daemon.signal(SIGTERM)
        _ = await daemon.waitForExit()
    }

    /// Without WATCHDOG_USEC there is no watchdog timer (idle is free).
    @Test func noWatchdogUnlessSystemdAsks() async throws {
        let (_, notify, daemon) = try await startedAsSystemdWould(["WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"])
        #expect(await notify.record(within: 10) { $0.hasPrefix("READY=1") } != nil)
        #expect(await notify.record(within: 2) { $0 == "WATCHDOG=1" } == nil, "the watchdog is for pid 1, not bgd")
        daemon.signal(SIGTERM)
        _ = await daemon.waitForExit()
    }

    @Test func installServiceWritesAUserUnit() async throws {
        let directory = TemporaryDirectory.make()
        let environment = ProcessInfo.processInfo.environment.merging(["XDG_CONFIG_HOME": directory + "/config"]) { $1 }
        let bgctl = try BuiltProducts.path(of: "bgctl")
        let installed = try await Command.run(
            bgctl, ["install-service", "--arguments=--http 127.0.0.1:8765"], environment: environment)
        #expect(
            installed.status == 0 && installed.standardOutput.contains("systemctl --user enable --now bgd"),
            "\(installed.standardError)")
        let unit = try String(contentsOfFile: directory + "/config/systemd/user/bgd.service", encoding: .utf8)
        #expect(
            unit.contains("Type=notify") && unit.contains("Restart=on-failure")
                && unit.contains("RestartPreventExitStatus=64 78")
                && unit.contains("WantedBy=default.target") && unit.contains("WatchdogSec=10min"))
        // Documentation= names a README that exists (this checkout's, for a bgd built in it).
        let documentation = try #require(
            unit.split(separator: "\n").first { $0.hasPrefix("Documentation=file://") }?.split(separator: " ").first)
        let readme = String(documentation.dropFirst("Documentation=file://".count))
        #expect(readme.hasSuffix("/README.md") && FileManager.default.fileExists(atPath: readme), "\(unit)")
        #expect(
            unit.contains("Delegate=yes") && unit.contains("KillMode=process"),
            "apps get cgroups of their own under bgd's: \(unit)")
        #expect(unit.contains("ExecStart=\(try BuiltProducts.path(of: "bgd")) --http 127.0.0.1:8765"), "\(unit)")
        // The socket unit: systemd listens where bgd would, and starts bgd at the first connection.
        #expect(unit.contains("After=bgd.socket"))
        let socket = try String(contentsOfFile: directory + "/config/systemd/user/bgd.socket", encoding: .utf8)
        #expect(
            socket.contains("ListenStream=%t/bgd/bgd.sock") && socket.contains("SocketMode=0600")
                && socket.contains("WantedBy=sockets.target"), "\(socket)")
        #expect(installed.standardOutput.contains("enable --now bgd.socket"))
        let again = try await Command.run(bgctl, ["install-service"], environment: environment)
        #expect(again.status != 0 && again.standardError.contains("--force"))
        let elsewhere = try await Command.run(
            bgctl, ["install-service", "--force", "--arguments=--socket /tmp/x/bgd.sock"], environment: environment)
        #expect(elsewhere.status == 0)
        #expect(
            try String(contentsOfFile: directory + "/config/systemd/user/bgd.socket", encoding: .utf8)
                .contains("ListenStream=/tmp/x/bgd.sock"))
        let removed = try await Command.run(bgctl, ["uninstall-service"], environment: environment)
        #expect(
            removed.status == 0
                && !FileManager.default.fileExists(atPath: directory + "/config/systemd/user/bgd.service")
                && !FileManager.default.fileExists(atPath: directory + "/config/systemd/user/bgd.socket"))
    }

    /// What the unit says is what systemd runs: a bgd whose path has a space (a checkout in "My
    /// Projects") is one quoted word, not two; a relative path in --arguments is refused (the
    /// service runs from the home directory, not from here); a bgd inside a build directory is
    /// warned of; a unit replaced says how to restart a running bgd.
    @Test func installServiceWritesWhatSystemdRuns() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = ProcessInfo.processInfo.environment.merging(["XDG_CONFIG_HOME": directory + "/config"]) { $1 }
        let bgctl = try BuiltProducts.path(of: "bgctl")
        let spaced = directory + "/My Projects"
        try FileManager.default.createDirectory(atPath: spaced, withIntermediateDirectories: true)
        #expect(symlink(try BuiltProducts.path(of: "bgd"), spaced + "/bgd") == 0)

        let relative = try await Command.run(
            bgctl, ["install-service", "--bgd", spaced + "/bgd", "--arguments=--push-certificate Package.swift"],
            environment: environment)
        #expect(relative.status != 0 && relative.standardError.contains("give it in full"), "\(relative.standardError)")
        #expect(!FileManager.default.fileExists(atPath: directory + "/config/systemd/user/bgd.service"))

        let installed = try await Command.run(
            bgctl, ["install-service", "--bgd", spaced + "/bgd", "--arguments=--http 127.0.0.1:8765"],
            environment: environment)
        #expect(installed.status == 0, "\(installed.standardError)")
        let unit = try String(contentsOfFile: directory + "/config/systemd/user/bgd.service", encoding: .utf8)
        #expect(unit.contains("ExecStart=\"\(spaced)/bgd\" --http 127.0.0.1:8765\n"), "\(unit)")
        #expect(!installed.standardOutput.contains("restart bgd"), "a first install has nothing to restart")
        let replaced = try await Command.run(
            bgctl, ["install-service", "--force", "--bgd", try BuiltProducts.path(of: "bgd")], environment: environment)
        #expect(replaced.status == 0 && replaced.standardOutput.contains("systemctl --user restart bgd"))
        #expect(replaced.standardError.contains("inside a build directory"), "\(replaced.standardError)")
    }

    /// `--arguments` are checked by the bgd the unit runs (`bgd --check`) before anything is
    /// written, as `bgrelay systemd-unit` checks serve's options: a unit bgd would refuse at
    /// every start is refused now (64), naming the option; checking makes no state.
    @Test func installServiceRefusesArgumentsBgdWouldRefuse() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = ProcessInfo.processInfo.environment.merging([
            "XDG_CONFIG_HOME": directory + "/config", "XDG_STATE_HOME": directory + "/state",
            "XDG_RUNTIME_DIR": directory + "/run",
        ]) { $1 }
        let bgctl = try BuiltProducts.path(of: "bgctl")
        let unit = directory + "/config/systemd/user/bgd.service"
        for (arguments, named) in [
            ("--bogus-flag", "--bogus-flag"), ("--http 127.0.0.1:8765 --push-port 70000", "--push-port"),
            ("--fetch-budget soon", "--fetch-budget"), ("--http 127.0.0.1:8765 stray", "stray"),
            ("--push-relay https://relay.example.net:2198 --push-relay-ca \(directory)/no.crt", "--push-relay-ca"),
            // Values that passed the check and then crashed bgd, or made it spin.
            ("--push-wakes-per-hour inf", "--push-wakes-per-hour"),
            ("--push-wakes-per-hour 1e19", "--push-wakes-per-hour"),
            ("--transfer-checkpoint 9999999999999GiB", "more bytes than bgd can count"),
            ("--transfer-rate-limit 9999999999999GiB", "more bytes than bgd can count"),
            ("--upload-quota 100KiB", "--upload-quota is at least 1MiB"),
            ("--upload-quota lots", "'lots' is not a size"),
            ("--fetch-floor 0s", "--fetch-floor"), ("--transfer-read-timeout 0s", "--transfer-read-timeout"),
            ("--push-relay https://127.0.0.1:99999", "a port is 1 to 65535"),
            ("--fetch-budget 99999999999d", "31 years"),
            // A mistyped sysfs root was read as mains power and an unmetered network, for good.
            ("--conditions /sys/clas", "--conditions is 'unconstrained' or a sysfs root"),
            ("--conditions unconstraned", "--conditions is 'unconstrained' or a sysfs root"),
        ] {
            let refused = try await Command.run(
                bgctl, ["install-service", "--force", "--arguments=\(arguments)"], environment: environment)
            #expect(refused.status == 64, "\(arguments): \(refused.standardError)")
            #expect(refused.standardError.contains(named), "\(arguments): \(refused.standardError)")
            #expect(!FileManager.default.fileExists(atPath: unit), "nothing written for \(arguments)")
        }
        let accepted = try await Command.run(
            bgctl, ["install-service", "--arguments=--http 127.0.0.1:8765 --fetch-budget 20s"],
            environment: environment)
        #expect(accepted.status == 0, "\(accepted.standardError)")
        #expect(
            try String(contentsOfFile: unit, encoding: .utf8)
                .contains("ExecStart=\(try BuiltProducts.path(of: "bgd")) --http 127.0.0.1:8765 --fetch-budget 20s\n"))
        #expect(!FileManager.default.fileExists(atPath: directory + "/state"), "bgd --check made no state")
        #expect(!FileManager.default.fileExists(atPath: directory + "/run/bgd"), "nor a socket")
    }

    /// uninstall-service stops and disables the units while their files are there, removes
    /// them, then has systemd forget them — in that order, saying so (it used to print "First:
    /// systemctl --user disable --now …" and remove the files before anyone could). A systemctl
    /// on PATH stands in for systemd's: it records what it is asked and whether the unit files
    /// were still there, and its user manager loaded them from this XDG_CONFIG_HOME.
    @Test func uninstallServiceStopsTheUnitsBeforeRemovingThem() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let units = directory + "/config/systemd/user"
        let log = directory + "/systemctl.log"
        try FileManager.default.createDirectory(atPath: directory + "/bin", withIntermediateDirectories: true)
        func systemctl(answering: Bool) throws {
            let script = """
                #!/bin/sh
                if [ -f "\(units)/bgd.service" ]; then files=present; else files=gone; fi
                echo "$* ($files)" >> "\(log)"
                \(answering ? "" : "echo 'Failed to connect to bus: No medium found' >&2; exit 1")
                case "$1 $2" in "--user show") for unit; do :; done; echo "\(units)/$unit" ;; esac
                exit 0

                """
            try script.write(toFile: directory + "/bin/systemctl", atomically: true, encoding: .utf8)
            chmod(directory + "/bin/systemctl", 0o755)
        }
        let environment = ProcessInfo.processInfo.environment.merging([
            "XDG_CONFIG_HOME": directory + "/config",
            "PATH": directory + "/bin:" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"),
        ]) { $1 }
        let bgctl = try BuiltProducts.path(of: "bgctl")

        try systemctl(answering: true)
        #expect(try await Command.run(bgctl, ["install-service"], environment: environment).status == 0)
        let removed = try await Command.run(bgctl, ["uninstall-service"], environment: environment)
        #expect(removed.status == 0, "\(removed.standardError)")
        #expect(!FileManager.default.fileExists(atPath: units + "/bgd.service"))
        #expect(!FileManager.default.fileExists(atPath: units + "/bgd.socket"))
        let asked = try String(contentsOfFile: log, encoding: .utf8).split(separator: "\n").map(String.init)
        #expect(asked.contains("--user disable --now bgd.socket bgd.service (present)"), "\(asked)")
        #expect(asked.last == "--user daemon-reload (gone)", "\(asked)")
        let said = removed.standardOutput
        let stopped = try #require(said.range(of: "disable --now"), "\(said)")
        let gone = try #require(said.range(of: "Removed"), "\(said)")
        #expect(stopped.lowerBound < gone.lowerBound && said.contains("daemon-reload"), "\(said)")
        #expect(!said.contains("First:"), "\(said)")

        // No user manager to ask (a container, su without a session): the units are removed,
        // with the links `enable` made, and bgctl says what may still run and how to stop it.
        try systemctl(answering: false)
        #expect(try await Command.run(bgctl, ["install-service"], environment: environment).status == 0)
        for (wants, unit) in [("default.target.wants", "bgd.service"), ("sockets.target.wants", "bgd.socket")] {
            try FileManager.default.createDirectory(atPath: units + "/" + wants, withIntermediateDirectories: true)
            try FileManager.default.createSymbolicLink(
                atPath: units + "/\(wants)/\(unit)", withDestinationPath: units + "/" + unit)
        }
        let offline = try await Command.run(bgctl, ["uninstall-service"], environment: environment)
        #expect(offline.status == 0, "\(offline.standardError)")
        let left = FileManager.default.enumerator(atPath: units)?.allObjects.compactMap { $0 as? String } ?? []
        #expect(!left.contains { $0.hasSuffix("bgd.service") || $0.hasSuffix("bgd.socket") }, "\(left)")
        let advice = offline.standardOutput
        #expect(advice.contains("systemctl --user stop bgd.socket bgd.service"), "\(advice)")
    }
}

/// Socket activation as systemd does it, by systemd's own `systemd-socket-activate` (the
/// LISTEN_FDS protocol of sd_listen_fds(3)): it listens on bgd's socket and starts bgd at the
/// first connection, passing it the listening socket.
@Suite(.timeLimit(.minutes(5)))
struct SocketActivationTests {
    static let activate = "/usr/bin/systemd-socket-activate"

    @Test func theFirstConnectionStartsBgdWhichServesTheSocketItWasGiven() async throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: Self.activate),
            "systemd-socket-activate is missing: apt-get install systemd (.ci/run does)")
        let directory = TemporaryDirectory.make()
        let socket = directory + "/run/bgd.sock"
        try FileManager.default.createDirectory(atPath: directory + "/run", withIntermediateDirectories: true)
        let listener = try Spawned(
            Self.activate,
            [
                "-l", socket, try BuiltProducts.path(of: "bgd"), "--state-dir", directory + "/state",
                "--push-port", "off", "--conditions", "unconstrained",
            ], mergeErrors: true)
        defer { listener.signal(SIGKILL) }
        let output = OutputWatcher(listener.output)
        #expect(await output.wait(for: "Listening on"))
        // Nothing runs bgd yet: systemd's socket is there, no bgd behind it.
        #expect(!FileManager.default.fileExists(atPath: directory + "/state"))

        // bgctl's first request starts it, and is answered (with the operator token bgd writes as it
        // starts, which bgctl looked for too early).
        let bgctl = try BuiltProducts.path(of: "bgctl")
        let status = try await Command.run(bgctl, ["status", "--json", "--socket", socket])
        #expect(status.status == 0, "\(status.standardError)")
        let started = try WireCoding.makeDecoder().decode(DaemonStatus.self, from: Data(status.standardOutput.utf8))
        #expect(started.socketPath == socket)
        #expect(await output.wait(for: "activation=systemd socket"), "\(output.text)")
        let registered = try await Command.run(
            bgctl, ["register", "com.example.activated", "--socket", socket, "--", "/bin/true"])
        #expect(registered.status == 0, "\(registered.standardError)")

        // Stopped, bgd leaves systemd's socket in place for its next start.
        // (systemd-socket-activate execs bgd: they are one process.)
        listener.signal(SIGTERM)
        #expect(await listener.waitForExit() == 0)
        var info = stat()
        #expect(lstat(socket, &info) == 0 && (info.st_mode & S_IFMT) == S_IFSOCK, "the socket file stays")
    }

    /// Two sockets (or any that is not one listening Unix socket) is a unit written wrong: bgd
    /// says so and exits with EX_CONFIG rather than serving something else.
    @Test func moreThanOneSocketIsRefused() async throws {
        try #require(FileManager.default.isExecutableFile(atPath: Self.activate))
        let directory = TemporaryDirectory.make()
        let listener = try Spawned(
            Self.activate,
            [
                "-l", directory + "/a.sock", "-l", directory + "/b.sock", try BuiltProducts.path(of: "bgd"),
                "--state-dir", directory + "/state", "--push-port", "off",
            ], mergeErrors: true)
        defer { listener.signal(SIGKILL) }
        let output = OutputWatcher(listener.output)
        #expect(await output.wait(for: "Listening on"))
        let probe = try await Command.run(
            try BuiltProducts.path(of: "bgctl"), ["status", "--socket", directory + "/a.sock"])
        #expect(probe.status != 0)
        #expect(await output.wait(for: "systemd passed 2 sockets"), "\(output.text)")
        #expect(await listener.waitForExit() == 78)
        #expect(!FileManager.default.fileExists(atPath: directory + "/state/bgd.sqlite"), "nothing was started")
    }
}
