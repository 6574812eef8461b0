import BackgroundTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// `Scripts/install.sh` into a temporary prefix, as a user would run it (from the binaries this
/// test run built, `--from`, instead of a release build): the installed bgd runs, the unit
/// `bgctl install-service` writes points at it and its README, and the uninstall takes back
/// everything it added and keeps the user's state unless asked (issue 18).
@Suite(.timeLimit(.minutes(5)))
struct InstallTests {
    /// The checkout this test was built from.
    static let checkout = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    @Test func installRunUninstall() async throws {
        let root = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: root) }
        let prefix = root + "/prefix"
        let environment = ProcessInfo.processInfo.environment.merging([
            "PREFIX": prefix, "HOME": root + "/home", "XDG_CONFIG_HOME": root + "/config",
            "XDG_STATE_HOME": root + "/state", "XDG_RUNTIME_DIR": root + "/run",
        ]) { $1 }
        func script(_ arguments: String...) async throws -> Command.Output {
            try await Command.run(
                "/bin/bash", [Self.checkout + "/Scripts/install.sh"] + arguments, environment: environment)
        }

        let installed = try await script("--from", BuiltProducts.directory)
        #expect(installed.status == 0, "\(installed.standardError)")
        for product in ["bgd", "bgctl", "bgd-confine", "bgrelay"] {
            #expect(FileManager.default.isExecutableFile(atPath: prefix + "/bin/" + product), "\(product)")
        }
        let readme = prefix + "/share/doc/swift-background/README.md"
        #expect(FileManager.default.fileExists(atPath: readme))
        let completion = try String(
            contentsOfFile: prefix + "/share/bash-completion/completions/bgctl", encoding: .utf8)
        #expect(completion.contains("bgctl") && completion.contains("complete"), "a bash completion script")
        for page in ["bgctl", "bgd", "bgrelay"] {
            let manual = try String(contentsOfFile: prefix + "/share/man/man1/\(page).1", encoding: .utf8)
            #expect(manual.contains(".Nm \(page)"), "the \(page)(1) man page")
        }

        // The installed bgd runs, with its helper beside it.
        let bgd = try Spawned(
            prefix + "/bin/bgd", ["--push-port", "off"], environment: environment, mergeErrors: true)
        defer { bgd.signal(SIGKILL) }
        let startup = await DaemonProcess.readUntil("bgd is ready", from: bgd.output)
        #expect(startup != nil)
        let status = try await Command.run(prefix + "/bin/bgctl", ["status"], environment: environment)
        #expect(status.status == 0, "\(status.standardError)")
        bgd.signal(SIGTERM)
        #expect(await bgd.waitForExit() == 0)

        // The unit runs the installed bgd and documents it with the installed README — bgctl
        // found on PATH, as a user types it, whose argv[0] is only "bgctl".
        var onPath = environment
        onPath["PATH"] = prefix + "/bin:" + (environment["PATH"] ?? "/usr/bin:/bin")
        // Where the units cannot go: said with the path, in the system's words.
        var unwritable = onPath
        unwritable["XDG_CONFIG_HOME"] = prefix + "/bin/bgctl/config"
        let refused = try await Command.run("/usr/bin/env", ["bgctl", "install-service"], environment: unwritable)
        #expect(
            refused.status == 1
                && refused.standardError.contains(
                    "cannot write the units in \(prefix)/bin/bgctl/config/systemd/user: Not a directory")
                && !refused.standardError.contains("Error Domain"), "\(refused)")
        let service = try await Command.run("/usr/bin/env", ["bgctl", "install-service"], environment: onPath)
        #expect(service.status == 0, "\(service.standardError)")
        let unit = try String(contentsOfFile: root + "/config/systemd/user/bgd.service", encoding: .utf8)
        #expect(unit.contains("ExecStart=\(prefix)/bin/bgd\n"), "\(unit)")
        #expect(unit.contains("Documentation=file://\(readme)"), "\(unit)")

        // The installed relay, found on PATH as an operator runs it, prints a system unit that
        // runs that binary (and refuses what serve would).
        let relayUnit = try await Command.run(
            "/usr/bin/env",
            [
                "bgrelay", "systemd-unit", "--enrollment-token-file", "/etc/bgrelay/token", "--database-file",
                "/etc/bgrelay/database", "--", "--host", "0.0.0.0", "--log-level", "info",
            ],
            environment: onPath)
        #expect(relayUnit.status == 0, "\(relayUnit.standardError)")
        #expect(
            relayUnit.standardOutput.contains(
                "ExecStart=\(prefix)/bin/bgrelay serve --state-dir /var/lib/bgrelay --host 0.0.0.0 --log-level info --enrollment-token-file ${CREDENTIALS_DIRECTORY}/enrollment-token --database-file ${CREDENTIALS_DIRECTORY}/database\n"
            ), "\(relayUnit.standardOutput)")
        for line in [
            "LoadCredential=enrollment-token:/etc/bgrelay/token", "LoadCredential=database:/etc/bgrelay/database",
            "DynamicUser=yes", "StateDirectory=bgrelay",
        ] {
            #expect(relayUnit.standardOutput.contains(line + "\n"), "\(line)")
        }
        if FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze") {
            // systemd's own reading: every key known, the executable there (it warns, on stderr).
            let unitFile = root + "/bgrelay.service"
            try relayUnit.standardOutput.write(toFile: unitFile, atomically: true, encoding: .utf8)
            let verified = try await Command.run("/usr/bin/systemd-analyze", ["verify", "--man=no", unitFile])
            #expect(verified.status == 0 && verified.standardError.isEmpty, "\(verified)")
        }
        for arguments in [
            ["systemd-unit", "--", "--port", "70000"], ["systemd-unit", "--", "--state-dir", "/tmp"],
            ["systemd-unit", "--", "--enrollment-token", "0123456789abcdef0"],
            ["systemd-unit", "--enrollment-token-file", "relative", "--"],
            ["systemd-unit", "--", "--node", "a\nExecStartPre=/bin/sh"],
            // A password in the unit (anyone's to read) and in ps: it goes in a file.
            ["systemd-unit", "--", "--database", "postgres://relay:secret@db.example/relay"],
            ["systemd-unit", "--", "--database-file", "/etc/bgrelay/database"],
            ["systemd-unit", "--database-file", "relative", "--"],
        ] {
            let refused = try await Command.run(prefix + "/bin/bgrelay", arguments, environment: environment)
            #expect(
                refused.status != 0 && refused.standardOutput.isEmpty && !refused.standardError.isEmpty, "\(arguments)")
        }

        // Uninstall: every file it added and the unit go; bgd's state stays.
        let state = root + "/state/bgd"
        #expect(FileManager.default.fileExists(atPath: state), "bgd made its state directory")
        let removed = try await script("--uninstall")
        #expect(removed.status == 0 && removed.standardOutput.contains("kept bgd's state"), "\(removed.standardError)")
        let left = FileManager.default.enumerator(atPath: prefix)?.allObjects.compactMap { $0 as? String } ?? []
        #expect(
            left.allSatisfy {
                !$0.contains("bgd") && !$0.contains("bgctl") && !$0.contains("bgrelay") && !$0.contains("README")
                    && !$0.hasSuffix(".1")
            },
            "\(left)")
        // Nor are the directories it made left behind empty (bin, share/man/man1, …).
        #expect(left.isEmpty, "\(left)")
        for unit in ["bgd.service", "bgd.socket"] {
            #expect(!FileManager.default.fileExists(atPath: root + "/config/systemd/user/" + unit), "\(unit)")
        }
        #expect(FileManager.default.fileExists(atPath: state))

        // Again (stand-ins this time: copying the real binaries twice is half a gigabyte of
        // writes that every other test's fsyncs would wait behind), and --purge takes the state too.
        let standIns = root + "/stand-ins"
        try FileManager.default.createDirectory(atPath: standIns, withIntermediateDirectories: true)
        for product in ["bgd", "bgctl", "bgd-confine", "bgrelay"] {
            try FileManager.default.copyItem(atPath: "/bin/true", toPath: standIns + "/" + product)
        }
        #expect(try await script("--from", standIns).status == 0)
        #expect(try await script("--uninstall", "--purge").status == 0)
        #expect(!FileManager.default.fileExists(atPath: state))
        #expect(try await script("--uninstall").status != 0, "nothing left to uninstall says so")
    }

    /// The man pages in docs/man (made by swift-argument-parser's generate-manual plugin,
    /// Scripts/generate-manual.sh) describe the commands as built: every subcommand and option the
    /// binary knows (its --experimental-dump-help) is in its page. Fails when a flag is added
    /// without regenerating them — and when an argument has no help.
    @Test(arguments: ["bgctl", "bgd", "bgrelay"])
    func theManPagesAreCurrent(_ product: String) async throws {
        let dump = try await Command.run(try BuiltProducts.path(of: product), ["--experimental-dump-help"])
        let manual = try String(contentsOfFile: Self.checkout + "/docs/man/\(product).1", encoding: .utf8)
        let tool = try #require(JSONSerialization.jsonObject(with: Data(dump.standardOutput.utf8)) as? [String: Any])
        var missing: [String] = []
        var unexplained: [String] = []
        func visit(_ command: [String: Any]) {
            if let name = command["commandName"] as? String, !manual.contains(name) { missing.append(name) }
            for argument in command["arguments"] as? [[String: Any]] ?? [] {
                let shouldDisplay = argument["shouldDisplay"] as? Bool ?? true
                // Every argument has help (issue 18): `bgctl X --help` and the page explain it.
                if shouldDisplay, command["commandName"] as? String != "help",
                    (argument["abstract"] as? String ?? "").isEmpty
                {
                    unexplained.append("\(command["commandName"] ?? "?") \(argument["valueName"] ?? "?")")
                }
                guard shouldDisplay, let names = argument["names"] as? [[String: Any]] else { continue }
                for name in names where name["kind"] as? String == "long" {
                    if let long = name["name"] as? String, !manual.contains("Fl -\(long)") {
                        missing.append("--" + long)
                    }
                }
            }
            for subcommand in command["subcommands"] as? [[String: Any]] ?? [] { visit(subcommand) }
        }
        visit(try #require(tool["command"] as? [String: Any]))
        // Each page says what its exit statuses mean (bgctl's were only in the README).
        #expect(manual.contains("Exit status: 0"), "docs/man/\(product).1 lists no exit statuses")
        #expect(missing.isEmpty, "docs/man/\(product).1 lacks \(Set(missing).sorted()); run Scripts/generate-manual.sh")
        #expect(unexplained.isEmpty, "arguments without help: \(unexplained)")
    }

    /// Every `bgctl …` command the README and docs/*.md show — in code blocks and inline, and the
    /// exit-status table's `simulate fetch …` — names only options that command has (its
    /// --experimental-dump-help): a reader who copies one gets no "Unknown option".
    @Test func theDocsNameOnlyOptionsBgctlHas() async throws {
        let dump = try await Command.run(try BuiltProducts.path(of: "bgctl"), ["--experimental-dump-help"])
        let tool = try #require(JSONSerialization.jsonObject(with: Data(dump.standardOutput.utf8)) as? [String: Any])
        var options: [[String]: Set<String>] = [:]
        func visit(_ command: [String: Any], _ path: [String]) {
            var names: Set<String> = ["--help", "--version"]
            for argument in command["arguments"] as? [[String: Any]] ?? [] {
                for name in argument["names"] as? [[String: Any]] ?? [] where name["kind"] as? String == "long" {
                    if let long = name["name"] as? String { names.insert("--" + long) }
                }
            }
            options[path] = names
            for subcommand in command["subcommands"] as? [[String: Any]] ?? [] {
                if let name = subcommand["commandName"] as? String { visit(subcommand, path + [name]) }
            }
        }
        visit(try #require(tool["command"] as? [String: Any]), [])
        let docs = try FileManager.default.contentsOfDirectory(atPath: Self.checkout + "/docs")
        let documents = ["README.md"] + docs.filter { $0.hasSuffix(".md") }.map { "docs/" + $0 }
        var unknown: [String] = []
        for document in documents {
            let text = try String(contentsOfFile: Self.checkout + "/" + document, encoding: .utf8)
            // Inline code, and the lines of code blocks (commands as they stand).
            var pieces: [String] = []
            var inBlock = false
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                if line.hasPrefix("```") {
                    inBlock.toggle()
                } else if inBlock {
                    pieces.append(String(line))
                } else {
                    pieces += line.split(separator: "`", omittingEmptySubsequences: false).enumerated()
                        .filter { $0.offset % 2 == 1 }.map { String($0.element) }
                }
            }
            for piece in pieces {
                let words = piece.split(whereSeparator: \.isWhitespace).map(String.init)
                var starts = words.indices.filter { words[$0].hasSuffix("bgctl") }.map { $0 + 1 }
                // `simulate fetch --wait`: a subcommand's path with no bgctl before it.
                if starts.isEmpty, words.count >= 2, options[[words[0], words[1]]] != nil { starts = [0] }
                for start in starts {
                    var path: [String] = []
                    var index = start
                    while index < words.count, options[path + [words[index]]] != nil {
                        path.append(words[index])
                        index += 1
                    }
                    guard !path.isEmpty, let known = options[path] else { continue }
                    for word in words[index...] {
                        if ["--", "|", "&&", "||", ";"].contains(word) || word.hasPrefix("#") { break }
                        guard word.hasPrefix("--") else { continue }
                        let name = String(word.prefix { $0 != "=" }).trimmingCharacters(
                            in: CharacterSet(charactersIn: "),`"))
                        if !known.contains(name) {
                            unknown.append("\(document): bgctl \(path.joined(separator: " ")) \(name)")
                        }
                    }
                }
            }
        }
        #expect(unknown.isEmpty, "\(Set(unknown).sorted())")
    }
}
