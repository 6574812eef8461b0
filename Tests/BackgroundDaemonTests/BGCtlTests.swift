import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// bgctl against a live daemon: the commands of the tour, their JSON, and their errors.
@Suite(.timeLimit(.minutes(5)))
struct BGCtlTests {
    func bgctl(_ daemon: TestDaemon, _ arguments: String...) async throws -> Command.Output {
        // Options go before any `--`, after the subcommand's name.
        try await Command.run(
            try BuiltProducts.path(of: "bgctl"), [arguments[0], "--socket", daemon.socketPath] + arguments.dropFirst())
    }

    @Test func registerListChangeAndUnregister() async throws {
        try await TestDaemon.with { daemon in
            let register = try await bgctl(
                daemon, "register", "com.example.cli", "--interval", "30m", "--", "/bin/true", "--flag")
            #expect(register.status == 0, "\(register.standardError)")
            #expect(register.standardOutput.contains("token: "))

            let apps = try await bgctl(daemon, "apps", "--json")
            let listed = try WireCoding.makeDecoder().decode([AppSummary].self, from: Data(apps.standardOutput.utf8))
            #expect(listed.map(\.id.rawValue) == ["com.example.cli"])
            #expect(listed.first?.launchCommand.arguments == ["/bin/true", "--flag"])
            #expect(listed.first?.fetchInterval == .every(.seconds(1800)))

            let text = try await bgctl(daemon, "apps")
            #expect(text.standardOutput.contains("com.example.cli"))
            #expect(text.standardOutput.contains("30m"))

            #expect(try await bgctl(daemon, "set-interval", "com.example.cli", "never").status == 0)
            let why = try await bgctl(daemon, "why", "com.example.cli", "--json")
            #expect(
                try WireCoding.makeDecoder().decode(WakeExplanation.self, from: Data(why.standardOutput.utf8))
                    .fetchInterval == .never)

            // Opens at 09:00 on three days: the model sees one session a day, at 09:00.
            for _ in 0..<3 {
                #expect(try await bgctl(daemon, "open", "com.example.cli").status == 0)
                daemon.clock.advance(by: .seconds(86400))
            }
            #expect(try await daemon.store.opens(of: AppID(rawValue: "com.example.cli")!).count == 3)
            let usage = try WireCoding.makeDecoder().decode(
                UsageSummary.self,
                from: Data(try await bgctl(daemon, "usage", "com.example.cli", "--json").standardOutput.utf8))
            #expect(usage.opensRecorded == 3)
            #expect(usage.busiestSlots.first?.start == "09:00")
            // Durations in seconds, as docs/api.md says (not Swift's [high, low] coding of a Duration).
            let raw = try await bgctl(daemon, "usage", "com.example.cli", "--json").standardOutput
            let chance = try #require(
                (try JSONSerialization.jsonObject(with: Data(raw.utf8)) as? [String: Any])?["openChance"]
                    as? [String: Any], "\(raw)")
            #expect(chance["within"] as? Double == usage.openChance?.within.seconds, "\(raw)")
            #expect(try await bgctl(daemon, "usage", "com.example.cli").standardOutput.contains("09:00"))
            #expect(try await bgctl(daemon, "usage", "com.example.cli", "--reset").status == 0)
            #expect(try await daemon.store.opens(of: AppID(rawValue: "com.example.cli")!).isEmpty)

            let status = try await bgctl(daemon, "status")
            #expect(status.standardOutput.contains("apps:    1"))

            #expect(try await bgctl(daemon, "unregister", "com.example.cli").status == 0)
            #expect(try await daemon.store.apps().isEmpty)
            #expect(!FileManager.default.fileExists(atPath: daemon.directory + "/state/containers/com.example.cli"))
        }
    }

    /// `--moments-out` writes every moment the learned planner's model scored: its features and
    /// whether the app was opened in the hour after, which is what the model learns to estimate.
    @Test func simulateTraceWritesTheMomentsTheLearnedModelScored() async throws {
        let bgctl = try BuiltProducts.path(of: "bgctl")
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // Ten days: mail at 13:00 and 21:00 UTC, news at 13:30.
        let start = 1_364_083_200  // 2013-03-24 00:00 UTC
        var opens: [(app: String, at: Int)] = []
        for day in 0..<10 {
            opens += [("mail", start + day * 86400 + 13 * 3600), ("news", start + day * 86400 + 13 * 3600 + 1800)]
            opens.append(("mail", start + day * 86400 + 21 * 3600))
        }
        let trace = "user,app,open_utc\n" + opens.map { "u1,\($0.app),\($0.at)\n" }.joined()
        try trace.write(toFile: directory + "/daily.csv", atomically: true, encoding: .utf8)
        let run = try await Command.run(
            bgctl,
            [
                "simulate", "trace", directory + "/daily.csv", "--policy", "learned", "--moments-out",
                directory + "/moments.csv",
            ])
        #expect(run.status == 0, "\(run.standardError)")
        let lines = try String(contentsOfFile: directory + "/moments.csv", encoding: .utf8).split(separator: "\n")
        let header =
            "user,app,moment_utc,estimate,opened,sinceLastOpen,sinceSecondLastOpen,gapRatio,overallRate,"
            + "hourOfDayRate,hourOfWeekRate,days7,days28,sameWeekday,userIdle,userActiveLastHour,coUsage,"
            + "firstAfterIdle,morningHabit"
        #expect(lines.first.map(String.init) == header)
        let rows = lines.dropFirst().map { $0.split(separator: ",").map(String.init) }
        // Every 10 minutes of nine days and a half, for whichever of the two apps is stale.
        #expect(rows.count > 2000, "\(rows.count) moments")
        var positives = 0
        for row in rows {
            try #require(row.count == 19, "\(row)")
            let (app, moment) = (row[1], try #require(Int(row[2])))
            let estimate = try #require(Double(row[3]))
            #expect(row[0] == "u1" && (0...1).contains(estimate), "\(row)")
            // Only an app not opened in the hour before is a moment, and its label is the trace's.
            let last = try #require(opens.last { $0.app == app && $0.at < moment }?.at, "\(row)")
            #expect(moment - last >= 3600, "\(row)")
            let opened = opens.contains { $0.app == app && $0.at > moment && $0.at <= moment + 3600 }
            #expect(row[4] == (opened ? "1" : "0"), "\(row)")
            positives += opened ? 1 : 0
        }
        // Six moments in the hour before each of the 27 opens after the first day's.
        #expect(positives >= 27 * 6, "\(positives)")
        // A file it cannot write is an error that says so.
        let unwritable = try await Command.run(
            bgctl,
            [
                "simulate", "trace", directory + "/daily.csv", "--policy", "learned", "--moments-out",
                directory + "/missing/moments.csv",
            ])
        #expect(unwritable.status != 0)
        #expect(
            unwritable.standardError.contains("cannot write \(directory)/missing/moments.csv"),
            "\(unwritable.standardError)")
    }

    @Test func simulateTraceRefusesBadInput() async throws {
        let bgctl = try BuiltProducts.path(of: "bgctl")
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try "user,app,open_utc\nu1,mail,tomorrow\n".write(
            toFile: directory + "/bad.csv", atomically: true, encoding: .utf8)
        // A file it cannot read or parse is no usage error (66, 65: no usage follows); options are.
        let cases: [([String], Int32, String)] = [
            (["simulate", "trace", directory + "/nope.csv"], 66, "no such file: \(directory)/nope.csv"),
            (["simulate", "trace", "/dev/zero"], 65, "/dev/zero is larger than 256 MiB"),
            (["simulate", "trace", directory + "/bad.csv"], 65, "line 2: open_utc must be Unix seconds"),
            (["simulate", "trace", directory + "/bad.csv", "--policy", "magic"], 64, "unknown policy 'magic'"),
            (
                ["simulate", "trace", directory + "/bad.csv", "--wakes-per-open", "0"], 64,
                "--wakes-per-open must be in (0, 100]"
            ),
            // A negative value is the option's, not an unknown option ("Missing value").
            (
                ["simulate", "trace", directory + "/bad.csv", "--wakes-per-open", "-1"], 64,
                "--wakes-per-open must be in (0, 100]"
            ),
            (
                ["simulate", "trace", directory + "/bad.csv", "--smoothing", "-3"], 64,
                "--smoothing is a number of slots"
            ),
            (["simulate", "trace", directory + "/bad.csv", "--wakes-per-open", "101"], 64, "must be in (0, 100]"),
            (["simulate", "trace", directory + "/bad.csv", "--utc-offset", "15"], 64, "--utc-offset is in hours"),
            (["simulate", "trace", directory + "/bad.csv", "--time-zone", "Mars/Olympus"], 64, "not a time zone"),
            (
                ["simulate", "trace", directory + "/bad.csv", "--time-zone", "Europe/Berlin", "--utc-offset", "1"], 64,
                "not both"
            ),
            // Options another mode would take and not use are refused, not ignored.
            (
                ["simulate", "trace", directory + "/bad.csv", "--frontier", "--wakes-per-open", "2"], 64,
                "--frontier runs its own budgets"
            ),
            (
                ["simulate", "trace", directory + "/bad.csv", "--planning-cost", "--policy", "learned"], 64,
                "--planning-cost measures the learned planner alone"
            ),
            (
                [
                    "simulate", "trace", directory + "/bad.csv", "--policy", "oracle", "--moments-out",
                    directory + "/m.csv",
                ],
                64, "--moments-out records the learned planner's model"
            ),
            (
                [
                    "simulate", "trace", directory + "/bad.csv", "--frontier", "--policy", "learned", "--moments-out",
                    directory + "/m.csv",
                ], 64, "use it with --policy learned alone, without --frontier"
            ),
        ]
        for (arguments, status, message) in cases {
            let output = try await Command.run(bgctl, arguments)
            #expect(output.status == status, "\(arguments)")
            #expect(output.standardError.contains(message), "\(output.standardError)")
            #expect(
                output.standardError.contains("Usage: bgctl simulate trace") == (status == 64),
                "\(output.standardError)")
            #expect(!output.standardError.contains("Usage: bgctl <subcommand>"), "\(output.standardError)")
        }
        try "user,app,open_utc\nu1,mail,1364095883\nu1,mail,1364099483\n".write(
            toFile: directory + "/tiny.csv", atomically: true, encoding: .utf8)
        let ok = try await Command.run(
            bgctl,
            ["simulate", "trace", directory + "/tiny.csv", "--policy", "oracle", "--wakes-out", directory + "/w.csv"])
        #expect(ok.status == 0, "\(ok.standardError)")
        #expect(
            try String(contentsOfFile: directory + "/w.csv", encoding: .utf8)
                == "user,app,wake_utc\nu1,mail,1364095823\nu1,mail,1364099423\n")
        // A negative UTC offset written with a space, as with '='.
        let west = try await Command.run(
            bgctl, ["simulate", "trace", directory + "/tiny.csv", "--policy", "oracle", "--utc-offset", "-4"])
        #expect(west.status == 0, "\(west.standardError)")
        // The frontier: every planner at every budget, as JSON, even on a trace too thin to learn from.
        let frontier = try await Command.run(
            bgctl, ["simulate", "trace", directory + "/tiny.csv", "--frontier", "--json"])
        #expect(frontier.status == 0, "\(frontier.standardError)")
        struct Report: Decodable {
            struct Row: Decodable {
                var planner: String
                var wakesPerOpen: Double
            }
            var oracleWakesPerUserDay: Double
            var rows: [Row]
        }
        let report = try JSONDecoder().decode(Report.self, from: Data(frontier.standardOutput.utf8))
        #expect(Set(report.rows.map(\.planner)) == ["learned", "hour-of-day", "reopen", "adaptive"])
        #expect(Set(report.rows.map(\.wakesPerOpen)) == [0.5, 1, 1.5, 2, 3, 4])
        // --policy picks the planners of the frontier; a policy that is not one is refused.
        let learnedOnly = try await Command.run(
            bgctl, ["simulate", "trace", directory + "/tiny.csv", "--frontier", "--policy", "learned", "--json"])
        #expect(learnedOnly.status == 0, "\(learnedOnly.standardError)")
        let learnedRows = try JSONDecoder().decode(Report.self, from: Data(learnedOnly.standardOutput.utf8)).rows
        #expect(learnedRows.map(\.planner) == Array(repeating: "learned", count: 6))
        let oracleFrontier = try await Command.run(
            bgctl, ["simulate", "trace", directory + "/tiny.csv", "--frontier", "--policy", "oracle"])
        #expect(oracleFrontier.status != 0 && oracleFrontier.standardError.contains("'oracle' is not one"))
    }

    /// Help says what bgd does now: the learned planner is its default, suspension freezes the
    /// app's cgroup (SIGSTOP only without one), and the journal format is journald's protocol.
    /// Every command names itself. Without a `commandName`, ArgumentParser derives the name
    /// from the type's with `String(describing:)`, whose dynamic casts scan every protocol
    /// conformance in the binary, once per command type and at every start: 36 % of the 25 ms
    /// `bgctl --version` took (perf, session 30), paid by every bgctl command.
    @Test func everyCommandNamesItself() throws {
        let checkout = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        for target in ["bgctl", "bgd", "bgrelay"] {
            let directory = checkout.appendingPathComponent("Sources/" + target)
            for file in try FileManager.default.contentsOfDirectory(atPath: directory.path)
            where file.hasSuffix(".swift") {
                let text = try String(contentsOf: directory.appendingPathComponent(file), encoding: .utf8)
                for part in text.components(separatedBy: "CommandConfiguration(").dropFirst() {
                    let arguments = part.drop { $0.isWhitespace }
                    #expect(arguments.hasPrefix("commandName:"), "\(target)/\(file): \(part.prefix(80))")
                }
            }
        }
    }

    @Test func helpSaysWhatBgdDoes() async throws {
        let trace = try await Command.run(try BuiltProducts.path(of: "bgctl"), ["simulate", "trace", "--help"])
        let traceHelp = trace.standardOutput.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(traceHelp.contains("learned runs the same model and planner as bgd by default"), "\(traceHelp)")
        #expect(!traceHelp.contains("adaptive policy's budget"), "\(traceHelp)")
        let bgd = try await Command.run(try BuiltProducts.path(of: "bgd"), ["--help"])
        let bgdHelp = bgd.standardOutput.split(whereSeparator: \.isWhitespace).joined(separator: " ")
        #expect(bgdHelp.contains("frozen in its cgroup (cgroup.freeze)"), "\(bgdHelp)")
        #expect(bgdHelp.contains("journald's native protocol"), "\(bgdHelp)")
        // Options parsed by a transform (durations, sizes) say their defaults, as the others do.
        for (option, shown) in [
            ("--fetch-budget <fetch-budget>", "30s"), ("--fetch-floor <fetch-floor>", "15m"),
            ("--keep-history <keep-history>", "30d"), ("--transfer-checkpoint <transfer-checkpoint>", "8MiB"),
            ("--unused-app-interval <unused-app-interval>", "6h"),
            ("--push-relay-keep-alive <push-relay-keep-alive>", "4m30s"),
            ("--upload-quota <upload-quota>", "4GiB"),
        ] {
            let help = try #require(bgdHelp.range(of: option), "\(option) in \(bgdHelp)")
            let next = bgdHelp[help.upperBound...].range(of: " --")?.lowerBound ?? bgdHelp.endIndex
            #expect(
                bgdHelp[help.upperBound..<next].contains("default: \(shown))"), "\(bgdHelp[help.upperBound..<next])")
        }
        // A keep-alive longer than a relay's silence limit would have the uplink closed under it.
        let slow = try await Command.run(try BuiltProducts.path(of: "bgd"), ["--push-relay-keep-alive", "11m"])
        #expect(slow.status == 64 && slow.standardError.contains("--push-relay-keep-alive is 1s to 10m"), "\(slow)")
        // A socket path the kernel cannot bind is refused by --check, not at start.
        let long = "/tmp/" + String(repeating: "s", count: 100) + "/bgd.sock"
        let unbindable = try await Command.run(try BuiltProducts.path(of: "bgd"), ["--check", "--socket", long])
        #expect(unbindable.status == 64 && unbindable.standardError.contains("shorter than 104"), "\(unbindable)")
    }

    /// A listing's --json is bgd's answer byte for byte, as curl would print it: before, bgctl
    /// decoded it and encoded it again — a field it did not know was dropped, and a time came
    /// out a millisecond off (.236 read back as .23599…, written as .235; `WireCoding.format`
    /// no longer does that either).
    @Test func jsonListingsAreBgdsOwnBytes() async throws {
        let clock = ManualClock(now: Date(timeIntervalSince1970: 1_795_851_614.236))
        try await TestDaemon.with(clock: clock) { daemon in
            try await daemon.register("com.example.exact", command: ["/bin/true"], interval: .minimum)
            for (arguments, path) in [
                (["apps"], "/v1/apps"), (["why", "com.example.exact"], "/v1/apps/com.example.exact/why"),
                (["history", "com.example.exact"], "/v1/apps/com.example.exact/history?limit=20"),
                (["transfers", "list"], "/v1/transfers?limit=50"), (["tasks", "list"], "/v1/tasks"),
            ] {
                let printed = try await Command.run(
                    try BuiltProducts.path(of: "bgctl"), arguments + ["--socket", daemon.socketPath, "--json"])
                let answer = try await RawHTTP.request(daemon.socketPath, .GET, path)
                #expect(answer.status == 200, "\(path): \(answer)")
                #expect(printed.standardOutput == String(decoding: answer.body, as: UTF8.self) + "\n", "\(arguments)")
            }
            let apps = try await RawHTTP.request(daemon.socketPath, .GET, "/v1/apps")
            #expect(
                String(decoding: apps.body, as: UTF8.self).contains("14.236Z"), "bgd's own time, to the millisecond")
        }
    }

    /// Every command answers --json with JSON: one that changes something says what it did, and a
    /// usage error is `{"error": "usage", …}` on stderr like every other failure.
    @Test func jsonIsJSONForEveryAnswer() async throws {
        try await TestDaemon.with { daemon in
            try await daemon.register("com.example.json", command: ["/bin/true"], interval: .never)
            let open = try await bgctl(daemon, "open", "com.example.json", "--json")
            let done = try JSONSerialization.jsonObject(with: Data(open.standardOutput.utf8)) as? [String: String]
            #expect(done == ["done": "open", "app": "com.example.json"], "\(open.standardOutput)")
            let reset = try await bgctl(daemon, "usage", "com.example.json", "--reset", "--json")
            #expect(reset.standardOutput.contains(#""done":"forgetOpens""#), "\(reset.standardOutput)")
            #expect(try await daemon.store.opens(of: AppID(rawValue: "com.example.json")!).isEmpty)

            let usage = try await bgctl(daemon, "history", "com.example.json", "--limit", "0", "--json")
            #expect(usage.status == 64)
            let error = try JSONSerialization.jsonObject(with: Data(usage.standardError.utf8)) as? [String: String]
            #expect(error?["error"] == "usage", "\(usage.standardError)")
            #expect(error?["reason"]?.contains("--limit") == true, "\(usage.standardError)")
            let unknownOption = try await bgctl(daemon, "apps", "--no-such-option", "--json")
            #expect(unknownOption.status == 64)
            #expect(unknownOption.standardError.contains(#""error":"usage""#), "\(unknownOption.standardError)")
            // Help is no error, with --json or not.
            let help = try await bgctl(daemon, "apps", "--help", "--json")
            #expect(help.status == 0 && help.standardOutput.contains("USAGE"), "\(help.standardOutput)")

            let unregister = try await bgctl(daemon, "unregister", "com.example.json", "--json")
            #expect(unregister.standardOutput.contains(#""done":"unregister""#), "\(unregister.standardOutput)")
        }
    }

    /// Reasons bgd writes with times in them (ISO 8601, UTC: exact for scripts) are told in local
    /// time with how far off, as bgctl tells every other time; --json keeps them exact.
    @Test func reasonsTellTimesLocally() async throws {
        try await TestDaemon.with { daemon in
            try await daemon.register("com.example.fresh", command: ["/bin/true"], interval: .minimum)
            // Offline: the wake due at a time waits for a network, and says so with the time.
            let offline = try await Command.run(
                try BuiltProducts.path(of: "bgctl"), ["env", "set", "--network", "none", "--socket", daemon.socketPath])
            try #require(offline.status == 0, "\(offline.standardError)")
            try await daemon.waitUntil {
                try await daemon.why("com.example.fresh").reasons.contains { $0.code == .noNetwork }
            }
            let iso = /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}/
            let json = try await bgctl(daemon, "why", "com.example.fresh", "--json")
            let why = try WireCoding.makeDecoder().decode(WakeExplanation.self, from: Data(json.standardOutput.utf8))
            let timed = try #require(why.reasons.first { $0.detail.contains(iso) }, "\(why.reasons)")
            let text = try await bgctl(daemon, "why", "com.example.fresh")
            #expect(!text.standardOutput.contains(iso), "\(text.standardOutput)")
            let line = try #require(
                text.standardOutput.split(separator: "\n").first { $0.contains(timed.code.rawValue + ":") },
                "\(text.standardOutput)")
            #expect(line.contains(/\d{2}:\d{2} \S+ \((in \S+|\S+ ago)\)/), "\(line)")
        }
    }

    /// Tables fit the terminal (`--full` for everything); outcomes are red or green on a
    /// terminal, plain with `NO_COLOR` or into a pipe; times in one ISO-like local format.
    @Test func tablesFitTheTerminalAndTroubleIsRed() async throws {
        try await TestDaemon.with { daemon in
            let app = "com.example.a-rather-long-application-identifier-for-the-table"
            try await daemon.register(app, command: ["/bin/false"], interval: .never)
            _ = try await daemon.waitForRunEnd(of: app) {
                _ = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
            }
            let bgctl = try BuiltProducts.path(of: "bgctl")
            let narrow = ProcessInfo.processInfo.environment.merging(["COLUMNS": "100"]) { $1 }
            let fitted = try await Command.run(
                bgctl, ["history", app, "--socket", daemon.socketPath], environment: narrow)
            let lines = fitted.standardOutput.split(separator: "\n")
            #expect(
                fitted.status == 0 && lines.count == 2 && lines.allSatisfy { $0.count <= 100 },
                "\(fitted.standardOutput)")
            #expect(!fitted.standardOutput.contains("\u{1B}["), "no colour into a pipe")
            let whole = try await Command.run(
                bgctl, ["history", app, "--full", "--socket", daemon.socketPath], environment: narrow)
            #expect(whole.standardOutput.split(separator: "\n").contains { $0.count > 100 }, "\(whole.standardOutput)")
            #expect(
                whole.standardOutput.range(of: #"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}"#, options: .regularExpression)
                    != nil)

            // On a terminal (script(1) gives bgctl one): a crashed run is red; NO_COLOR turns it off.
            let command = "\(bgctl) history \(app) --socket \(daemon.socketPath)"
            // (The test runner may run with NO_COLOR set; the first run is without it.)
            let colourful = ProcessInfo.processInfo.environment.filter { $0.key != "NO_COLOR" }
            let onTerminal = try await Command.run(
                "/usr/bin/script", ["-qec", command, "/dev/null"], environment: colourful)
            #expect(onTerminal.standardOutput.contains("\u{1B}[31mcrashed"), "\(onTerminal.standardOutput)")
            let noColour = try await Command.run(
                "/usr/bin/script", ["-qec", command, "/dev/null"],
                environment: ProcessInfo.processInfo.environment.merging(["NO_COLOR": "1"]) { $1 })
            #expect(noColour.standardOutput.contains("crashed") && !noColour.standardOutput.contains("\u{1B}[31m"))

            // A fetch that ends without the app's answer exits 1 (README's table), with --json too.
            for json in [false, true] {
                let fetch = try await Command.run(
                    bgctl, ["simulate", "fetch", app, "--socket", daemon.socketPath] + (json ? ["--json"] : []))
                #expect(fetch.status == 1 && fetch.standardOutput.contains("crashed"), "json \(json): \(fetch)")
                // Why, on stderr: with --json it was {"error":"failed","reason":""}.
                let why = json ? #""error":"runNotAnswered""# : "without the app's answer"
                #expect(fetch.standardError.contains(why) && fetch.standardError.contains("crashed"), "\(fetch)")
            }
        }
    }

    @Test func badInputIsRefusedWithAMessage() async throws {
        try await TestDaemon.with { daemon in
            let badID = try await bgctl(daemon, "register", "not-reverse-dns", "--", "/bin/true")
            #expect(badID.status == 64)
            #expect(badID.standardError.contains("reverse-DNS"))

            let badInterval = try await bgctl(
                daemon, "register", "com.example.x", "--interval", "often", "--", "/bin/true")
            #expect(badInterval.status == 64)
            #expect(badInterval.standardError.contains("'never', 'minimum', or a duration"))

            let noCommand = try await bgctl(daemon, "register", "com.example.x")
            #expect(noCommand.status == 64)
            #expect(noCommand.standardError.contains("launch command after --"))

            // Each cause has its exit status (README, "bgctl"), and --json says it as JSON on stderr.
            let missing = try await bgctl(daemon, "register", "com.example.x", "--", "/no/such/app")
            #expect(missing.status == 65, "bgd found the request bad")
            #expect(missing.standardError.contains("/no/such/app is not an executable file"))

            let unknown = try await bgctl(daemon, "why", "com.example.nope")
            #expect(unknown.status == 3, "no such app")
            #expect(unknown.standardError.contains("no app com.example.nope is registered"))
            let unknownJSON = try await bgctl(daemon, "why", "com.example.nope", "--json")
            let error =
                try JSONSerialization.jsonObject(with: Data(unknownJSON.standardError.utf8)) as? [String: String]
            #expect(unknownJSON.status == 3 && error?["error"] == "unknownApp", "\(unknownJSON.standardError)")
            #expect(error?["reason"]?.contains("no app com.example.nope is registered") == true)
            // The progress line comes only for an app bgd knows.
            let unknownFetch = try await Command.run(
                try BuiltProducts.path(of: "bgctl"),
                ["simulate", "fetch", "com.example.nope", "--socket", daemon.socketPath])
            #expect(unknownFetch.status == 3, "\(unknownFetch.standardError)")
            #expect(unknownFetch.standardError.contains("no app com.example.nope is registered"))
            #expect(!unknownFetch.standardError.contains("Waking"), "\(unknownFetch.standardError)")

            #expect(try await daemon.store.apps().isEmpty, "nothing was registered")

            let noDaemon = try await Command.run(
                try BuiltProducts.path(of: "bgctl"), ["status", "--socket", daemon.directory + "/nobody.sock"])
            #expect(noDaemon.status == 69, "bgd unreachable")
            // Both ways bgd is started: from a clone, or the systemd unit `bgctl install-service` wrote.
            #expect(noDaemon.standardError.contains("`swift run bgd`"), "\(noDaemon.standardError)")
            #expect(noDaemon.standardError.contains("`systemctl --user start bgd`"), "\(noDaemon.standardError)")
            let noDaemonJSON = try await Command.run(
                try BuiltProducts.path(of: "bgctl"),
                ["status", "--json", "--socket", daemon.directory + "/nobody.sock"])
            #expect(
                noDaemonJSON.standardError.contains(#""error":"daemonUnreachable""#), "\(noDaemonJSON.standardError)")
            // Given a directory (the state directory, say) for the socket: said so.
            let directoryGiven = try await Command.run(
                try BuiltProducts.path(of: "bgctl"), ["status", "--socket", daemon.directory])
            #expect(
                directoryGiven.status == 69 && directoryGiven.standardError.contains("it is a directory, not a socket"),
                "\(directoryGiven.standardError)")
        }
    }

    /// Another user's bgd is running, not missing: bgctl says whose socket or token it is, exits
    /// 77, and does not advise starting a second bgd. (Root passes every permission: the check
    /// runs bgctl as nobody, so it needs root to switch to nobody.)
    @Test(.enabled(if: getuid() == 0)) func anotherUsersBgdIsSaidToBeAnotherUsers() async throws {
        try await TestDaemon.with { daemon in
            let bgctl = try BuiltProducts.path(of: "bgctl")
            func asNobody(_ arguments: [String]) async throws -> Command.Output {
                try await Command.run(
                    "/usr/bin/setpriv",
                    ["--reuid=nobody", "--regid=nogroup", "--clear-groups", bgctl] + arguments
                        + ["--socket", daemon.socketPath])
            }
            let refused = try await asNobody(["status", "--json"])
            #expect(refused.status == 77, "\(refused)")
            #expect(refused.standardError.contains(#""error":"socketNotPermitted""#), "\(refused.standardError)")
            #expect(refused.standardError.contains("run as the user bgd runs as"), "\(refused.standardError)")
            #expect(!refused.standardError.contains("swift run bgd"), "\(refused.standardError)")

            // A socket others may connect to, with the operator token still bgd's user's alone.
            #expect(chmod(daemon.socketPath, 0o666) == 0)
            let noToken = try await asNobody(["apps"])
            #expect(noToken.status == 77, "\(noToken)")
            #expect(
                noToken.standardError.contains("cannot read bgd's operator token")
                    && !noToken.standardError.contains("or use bgctl"), "\(noToken.standardError)")
        }
    }

    /// A file that is not there is said to be missing (66), one that is there but wrong is said to
    /// be wrong (65): neither is a usage error, so no usage follows. Bad ids are usage errors, shown
    /// with the subcommand's usage, not the top command's.
    @Test func fileProblemsAreNotUsageErrors() async throws {
        try await TestDaemon.with { daemon in
            let directory = TemporaryDirectory.make()
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let payload = directory + "/payload.json"
            try #"{"aps":{"content-available":1}}"#.write(toFile: payload, atomically: true, encoding: .utf8)
            let ids = ["--key-id", "ABC123DEFG", "--team-id", "TEAM123456"]
            let cases: [([String], Int32, String)] = [
                (
                    ["push", "send", "com.example.x", payload, "--key", directory + "/nokey.p8"] + ids, 66,
                    "no such file: \(directory)/nokey.p8"
                ),
                (
                    ["push", "send", "com.example.x", directory + "/missing.json", "--key", payload] + ids, 66,
                    "no such file: \(directory)/missing.json"
                ),
                (
                    ["push", "send", "com.example.x", payload, "--key", payload] + ids, 65,
                    "is not a P-256 private key in PEM"
                ),
                (["push", "jwt", "--key", directory + "/nokey.p8"] + ids, 66, "no such file: \(directory)/nokey.p8"),
                (
                    ["push", "keys", "add", "--topics", "com.example.x", directory + "/nokey.p8"] + ids, 66,
                    "no such file: \(directory)/nokey.p8"
                ),
                (["push", "keys", "add", "--topics", "com.example.x", payload] + ids, 65, "is not a P-256 key in PEM"),
                (["register", "--manifest", directory + "/bad.json"], 66, "no such file: \(directory)/bad.json"),
                (["register", "--manifest", payload], 65, "unknown field 'aps'"),
                (
                    [
                        "push", "keys", "add", "--key-id", "SHORT", "--team-id", "TEAM123456", "--topics",
                        "com.example.x", payload,
                    ], 64, "Usage: bgctl push keys add"
                ),
                // A device that never ends is refused once past what such a file weighs, not read for ever.
                (
                    ["push", "keys", "add", "--topics", "com.example.x", "/dev/zero"] + ids, 65,
                    "/dev/zero is larger than 1 MiB"
                ),
                (
                    ["push", "send", "com.example.x", "/dev/zero", "--key", payload] + ids, 65,
                    "/dev/zero is larger than 1 MiB"
                ),
                // A relay's certificate that is a key: said so (65), not as a relay TLS cannot reach.
                (
                    ["push", "relay", "enroll", "https://127.0.0.1:2198", "--certificate", payload, "--replace"], 65,
                    "is not a PEM certificate"
                ),
                // URLs no connection could be made to are usage errors, checked before anything is sent.
                (["push", "relay", "enroll", "https://127.0.0.1:99999"], 64, "a port is 1 to 65535"),
                (["push", "relay", "enroll", "ftp://relay.example.net"], 64, "http or https"),
                (
                    [
                        "push", "send", "com.example.x", payload, "--key", payload, "--gateway",
                        "https://127.0.0.1:99999",
                    ] + ids, 64, "a port is 1 to 65535"
                ),
                (
                    ["push", "send", "com.example.x", payload, "--key", payload, "--gateway", "ftp://x"] + ids, 64,
                    "http or https"
                ),
                (["download", "http://127.0.0.1:99999/x", "--to", directory + "/x"], 64, "a port is 1 to 65535"),
                (["status", "--socket", ""], 64, "--socket is a path"),
                (["download", "http://127.0.0.1:8/x", "--to", ""], 64, "--to is a file's path"),
            ]
            for (arguments, status, message) in cases {
                // push jwt needs no bgd, and takes no --socket.
                let socket =
                    arguments[1] == "jwt" || arguments.contains("--socket") ? [] : ["--socket", daemon.socketPath]
                let output = try await Command.run(try BuiltProducts.path(of: "bgctl"), arguments + socket)
                #expect(output.status == status, "\(arguments): \(output.standardError)")
                #expect(output.standardError.contains(message), "\(arguments): \(output.standardError)")
                #expect(
                    output.standardError.contains("Usage:") == (status == 64), "\(arguments): \(output.standardError)")
                #expect(
                    !output.standardError.contains("Usage: bgctl <subcommand>"), "\(arguments): \(output.standardError)"
                )
            }
            let json = try await bgctl(daemon, "register", "--manifest", directory + "/bad.json", "--json")
            #expect(json.standardError.contains(#""error":"fileUnreadable""#), "\(json.standardError)")
            // An app's own --json, after `--`, is not bgctl's: the usage error is said as usual.
            let appsJSON = try await bgctl(
                daemon, "register", "com.example.json", "--interval", "bogus", "--", "/bin/true", "--json")
            #expect(
                appsJSON.status == 64 && appsJSON.standardError.contains("Usage:")
                    && !appsJSON.standardError.contains(#""error":"usage""#), "\(appsJSON.standardError)")
        }
    }

    /// An existing unit is refused with install-service's usage, before anything is written.
    @Test func installServiceRefusesAnExistingUnitWithItsOwnUsage() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory + "/systemd/user", withIntermediateDirectories: true)
        try "[Unit]\n".write(toFile: directory + "/systemd/user/bgd.service", atomically: true, encoding: .utf8)
        let output = try await Command.run(
            try BuiltProducts.path(of: "bgctl"), ["install-service", "--bgd", try BuiltProducts.path(of: "bgd")],
            environment: ProcessInfo.processInfo.environment.merging(["XDG_CONFIG_HOME": directory]) { $1 })
        #expect(output.status == 64, "\(output.standardError)")
        #expect(output.standardError.contains("exists; add --force"), "\(output.standardError)")
        #expect(output.standardError.contains("Usage: bgctl install-service"), "\(output.standardError)")
        #expect(try String(contentsOfFile: directory + "/systemd/user/bgd.service", encoding: .utf8) == "[Unit]\n")
        // A socket unit alone (the user's own) is not replaced unasked either.
        try FileManager.default.moveItem(
            atPath: directory + "/systemd/user/bgd.service", toPath: directory + "/systemd/user/bgd.socket")
        let socketOnly = try await Command.run(
            try BuiltProducts.path(of: "bgctl"), ["install-service", "--bgd", try BuiltProducts.path(of: "bgd")],
            environment: ProcessInfo.processInfo.environment.merging(["XDG_CONFIG_HOME": directory]) { $1 })
        #expect(socketOnly.status == 64 && socketOnly.standardError.contains("bgd.socket exists"), "\(socketOnly)")
        #expect(try String(contentsOfFile: directory + "/systemd/user/bgd.socket", encoding: .utf8) == "[Unit]\n")
        #expect(!FileManager.default.fileExists(atPath: directory + "/systemd/user/bgd.service"), "nothing is written")
    }

    /// An app registered already: the error points at --replace, which keeps its history, and
    /// following it works.
    @Test func registeringAgainPointsAtReplace() async throws {
        try await TestDaemon.with { daemon in
            #expect(try await bgctl(daemon, "register", "com.example.twice", "--", "/bin/true").status == 0)
            let again = try await bgctl(daemon, "register", "com.example.twice", "--", "/bin/echo")
            #expect(again.status == 4, "a conflict")
            #expect(again.standardError.contains("--replace"), "\(again.standardError)")
            #expect(!again.standardError.contains("first to replace it"), "\(again.standardError)")
            let replaced = try await bgctl(daemon, "register", "com.example.twice", "--replace", "--", "/bin/echo")
            #expect(replaced.status == 0, "\(replaced.standardError)")
            let apps = try WireCoding.makeDecoder().decode(
                [AppSummary].self, from: Data(try await bgctl(daemon, "apps", "--json").standardOutput.utf8))
            #expect(apps.first?.launchCommand.arguments == ["/bin/echo"])
        }
    }

    /// Counts bgd would refuse are bgctl's usage errors (64, naming the option), not bgd's
    /// "malformed request" (65) — and a negative one is refused as a number, not "Missing value".
    @Test func countsAreCheckedBeforeAskingBgd() async throws {
        try await TestDaemon.with { daemon in
            try await daemon.register("com.example.counts", command: ["/bin/true"], interval: .never)
            let cases: [([String], String)] = [
                (["history", "com.example.counts", "--limit", "0"], "--limit"),
                (["history", "com.example.counts", "--limit=-1"], "--limit"),
                (["history", "com.example.counts", "--limit", "-1"], "--limit"),
                (["history", "com.example.counts", "--limit", "1001"], "--limit"),
                (["push", "log", "com.example.counts", "--limit", "0"], "--limit"),
                (["transfers", "list", "--limit", "0"], "--limit"),
                (["transfers", "--limit", "-2"], "--limit"),
                (["forecast", "com.example.counts", "--hours", "-1"], "--hours"),
                (["env", "set", "--battery", "-1"], "--battery"),
            ]
            for (arguments, option) in cases {
                let output = try await Command.run(
                    try BuiltProducts.path(of: "bgctl"), arguments + ["--socket", daemon.socketPath])
                #expect(output.status == 64, "\(arguments): \(output.standardError)")
                #expect(
                    output.standardError.contains(option) && !output.standardError.contains("Missing value"),
                    "\(arguments): \(output.standardError)")
            }
            let history = try await bgctl(daemon, "history", "com.example.counts", "--limit", "1")
            #expect(history.status == 0, "\(history.standardError)")
        }
    }
}
