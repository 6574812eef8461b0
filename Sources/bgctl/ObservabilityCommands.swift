import ArgumentParser
import BackgroundModel
import Foundation
import QuietThreads

#if canImport(Glibc)
    import Glibc
#endif

extension BGCtl {
    struct Dashboard: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "dashboard",
            abstract:
                "Print a one-time login link to bgd's dashboard (bgd --http 127.0.0.1:PORT) and open it in a browser.")
        @OptionGroup var options: DaemonOptions
        @Flag(help: "Only print the link.") var noOpen = false

        func run() async throws {
            let login = try await options.call {
                try await $0.send(.post, "/v1/dashboard/login", as: DashboardLogin.self)
            }
            if options.json { return try options.printJSON(login) }
            print(login.url)
            print("(valid once, for 10 minutes; the dashboard is \(login.base)/)")
            let environment = ProcessInfo.processInfo.environment
            guard !noOpen, environment["DISPLAY"] != nil || environment["WAYLAND_DISPLAY"] != nil,
                let opener = ["/usr/bin/xdg-open", "/usr/bin/open"].first(where: {
                    FileManager.default.isExecutableFile(atPath: $0)
                })
            else { return }
            // posix_spawn, not Foundation's Process (whose run() can crash on Linux, swift-corelibs-foundation#5472).
            var pid: pid_t = 0
            let argv = [strdup(opener), strdup(login.url), nil]
            defer { argv.forEach { free($0) } }
            _ = posix_spawn(&pid, opener, nil, nil, argv, environ)
        }
    }

    struct InstallService: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "install-service",
            abstract: "Write a systemd user unit that runs bgd, and say how to enable it.",
            discussion: """
                --arguments are checked first by the bgd the unit runs (bgd --check): arguments it would
                refuse are refused here, and nothing is written.
                """)
        @Option(help: "The bgd to run (default: the one beside this bgctl).") var bgd: String?
        @Option(help: "Extra arguments for bgd, e.g. --arguments='--http 127.0.0.1:8765'.") var arguments: String = ""
        @Flag(help: "Replace an existing unit.") var force = false

        func validate() throws {
            if arguments.contains(where: \.isNewline) {
                throw ValidationError("--arguments cannot hold a line break: they go on the unit's one ExecStart= line")
            }
            try Self.refuseRelativePaths(in: arguments)
            try Self.check(arguments, with: try executable())
            // Here, not in run(): a refusal from validate() is shown with this command's usage.
            // Either unit: a bgd.socket of the user's own was replaced unasked when only the
            // service was looked for.
            for path in [Self.unitPath(), Self.socketUnitPath()]
            where FileManager.default.fileExists(atPath: path) && !force {
                throw ValidationError("\(path) exists; add --force to replace it")
            }
        }

        func executable() throws -> String {
            let executable = try bgd ?? Self.besideMe("bgd")
            guard FileManager.default.isExecutableFile(atPath: executable), executable.hasPrefix("/") else {
                throw ValidationError(
                    "no bgd at \(executable); build it (swift build -c release) or give --bgd /absolute/path/to/bgd")
            }
            return executable
        }

        func run() async throws {
            let executable = try executable()
            let path = Self.unitPath()
            let socketPath = Self.socketUnitPath()
            let directory = (path as NSString).deletingLastPathComponent
            let documentation = Self.readme(near: executable)
            let replaced = FileManager.default.fileExists(atPath: path)
            // Said in the system's words with the path, not as Foundation's error dump.
            do {
                try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                try Self.unit(executable: executable, arguments: arguments, documentation: documentation)
                    .write(toFile: path, atomically: true, encoding: .utf8)
                try Self.socketUnit(listening: Self.socketArgument(in: arguments), documentation: documentation)
                    .write(toFile: socketPath, atomically: true, encoding: .utf8)
            } catch {
                failCommand(
                    "cannotWrite", "cannot write the units in \(directory): \(SystemErrorText.describe(error))",
                    json: false, exit: BGCtlExit.failure)
            }
            if executable.contains("/.build/") {
                FileHandle.standardError.write(
                    Data(
                        "bgctl: the unit runs \(executable), inside a build directory: `swift package clean` or a new checkout removes it, and the service stops starting. Install first (Scripts/install.sh puts bgd in ~/.local/bin), then run that bgctl's install-service --force.\n"
                            .utf8))
            }
            print("Wrote \(path) and \(socketPath). Either keep bgd running:")
            print("  systemctl --user daemon-reload && systemctl --user enable --now bgd")
            if replaced {
                // enable --now starts a stopped bgd; one running keeps its old arguments until restarted.
                print("  (bgd running already? systemctl --user daemon-reload && systemctl --user restart bgd)")
            }
            print("or let bgctl and apps start it when they first connect (socket activation):")
            print("  systemctl --user daemon-reload && systemctl --user enable --now bgd.socket")
            print(
                "Its logs: journalctl --user -u bgd -f    To keep it running when you log out: loginctl enable-linger $USER"
            )
        }

        /// Type=notify: bgd says READY=1 once its socket accepts connections, STATUS= as it plans,
        /// STOPPING=1 when it stops, and WATCHDOG=1 every 5 minutes (half of WatchdogSec) after
        /// its store has answered — a bgd that hangs is restarted.
        static func unit(executable: String, arguments: String, documentation: String?) -> String {
            """
            [Unit]
            Description=swift-background daemon (bgd): background fetch, transfers, push and tasks for your apps
            \(documentation.map { "Documentation=\(Self.fileURI($0)) man:bgd(1)" } ?? "Documentation=man:bgd(1)")
            # Started by bgd.socket too, when it is enabled: bgd then serves the socket systemd passes.
            After=bgd.socket

            [Service]
            Type=notify
            NotifyAccess=main
            WatchdogSec=10min
            ExecStart=\(([executable] + Self.words(of: arguments)).map(SystemdWord.quoted).joined(separator: " "))
            Restart=on-failure
            RestartSec=2
            # A usage error (64) or a configuration to fix (78: a certificate, the socket passed)
            # is not mended by starting again.
            RestartPreventExitStatus=64 78
            # bgd stops cleanly on SIGTERM: apps get their expiration handlers and the kill grace.
            TimeoutStopSec=20
            # bgd's cgroup is its own to divide: each app runs in a cgroup of its own under it
            # (frozen to suspend, ended whole, its CPU time counted). KillMode=process: systemd
            # signals bgd alone. bgd ends the apps it launched itself on stop, and a restarted bgd
            # ends what a crashed one left and thaws the apps you started (which systemd would
            # otherwise kill with it: they sit in bgd's cgroup while bgd holds them).
            Delegate=yes
            KillMode=process

            [Install]
            WantedBy=default.target

            """
        }

        /// bgd.socket: systemd listens on bgd's socket and starts bgd at the first connection
        /// (`bgctl`, an app); connections made while it starts wait in the backlog, and bgd
        /// serves that socket (LISTEN_FDS) instead of binding its own.
        static func socketUnit(listening path: String?, documentation: String?) -> String {
            """
            [Unit]
            Description=swift-background daemon's socket: bgctl and apps start bgd on demand
            \(documentation.map { "Documentation=\(Self.fileURI($0)) man:bgd(1)" } ?? "Documentation=man:bgd(1)")

            [Socket]
            ListenStream=\(path ?? "%t/bgd/bgd.sock")
            SocketMode=0600
            DirectoryMode=0700

            [Install]
            WantedBy=sockets.target

            """
        }

        /// Runs the bgd the unit will run with the unit's arguments and `--check` — bgd's own
        /// option parser and checks, as `bgrelay systemd-unit` parses serve's — and refuses what
        /// it would refuse at every start, with its reason (which names the argument).
        static func check(_ arguments: String, with executable: String) throws {
            let words = Self.words(of: arguments)
            guard let answer = Subprocess.run(executable, words + ["--check"]) else {
                #if os(Linux)
                    throw ValidationError("\(executable) --check did not answer; --arguments are not checked")
                #else
                    return
                #endif
            }
            guard answer.status != 0 else { return }
            let lines = answer.output.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            let reason =
                lines.first { $0.hasPrefix("Error: ") }.map { String($0.dropFirst("Error: ".count)) }
                ?? lines.first ?? "exit status \(answer.status)"
            if reason.contains("'--check'") {
                // A bgd from before --check: it cannot say, so the unit is written unchecked.
                FileHandle.standardError.write(
                    Data("bgctl: \(executable) has no --check (an older bgd); --arguments are not checked\n".utf8))
                return
            }
            throw ValidationError("bgd refuses --arguments='\(arguments)': \(reason)")
        }

        /// A file's URI for Documentation= (which separates URIs at spaces): its path escaped, and
        /// each `%` of the escapes doubled (systemd reads specifiers there: `%20` is none).
        static func fileURI(_ path: String) -> String {
            URL(fileURLWithPath: path).absoluteString.replacingOccurrences(of: "%", with: "%%")
        }

        /// The service runs from the home directory, not from where bgctl runs: a relative path
        /// that names a file here (`--push-certificate gw.crt`) passed bgd's check here, and the
        /// service could not find it at every start.
        static func refuseRelativePaths(in arguments: String) throws {
            for word in Self.words(of: arguments) {
                let value =
                    word.hasPrefix("--")
                    ? word.split(separator: "=", maxSplits: 1).dropFirst().first.map(String.init) : word
                guard let value, !value.isEmpty, !value.hasPrefix("/"), !value.hasPrefix("-"),
                    FileManager.default.fileExists(atPath: value)
                else { continue }
                let full = URL(fileURLWithPath: value).standardizedFileURL.path
                throw ValidationError(
                    "'\(value)' in --arguments is a path from here, and the service runs from your home directory: give it in full (\(full))"
                )
            }
        }

        /// The words of ExecStart= as systemd splits them: at white space, quotes keeping one
        /// word whole.
        static func words(of arguments: String) -> [String] {
            var words: [String] = []
            var word: String?
            var quote: Character?
            for character in arguments {
                if let open = quote {
                    if character == open { quote = nil } else { word = (word ?? "") + String(character) }
                } else if character == "\"" || character == "'" {
                    quote = character
                    word = word ?? ""
                } else if character.isWhitespace {
                    if let done = word { words.append(done) }
                    word = nil
                } else {
                    word = (word ?? "") + String(character)
                }
            }
            if let done = word { words.append(done) }
            return words
        }

        /// The `--socket` among bgd's arguments, if any: the socket unit listens there instead.
        static func socketArgument(in arguments: String) -> String? {
            let words = Self.words(of: arguments)
            for (index, word) in words.enumerated() {
                if word.hasPrefix("--socket=") { return String(word.dropFirst("--socket=".count)) }
                if word == "--socket", index + 1 < words.count { return words[index + 1] }
            }
            return nil
        }

        static func socketUnitPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
            (unitPath(environment: environment) as NSString).deletingLastPathComponent + "/bgd.socket"
        }

        static func unitPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
            let config =
                environment["XDG_CONFIG_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
                ?? (NSHomeDirectory() + "/.config")
            return config + "/systemd/user/bgd.service"
        }

        /// The README for the bgd at `executable`: installed beside it (PREFIX/share/doc), or the
        /// checkout it was built in.
        static func readme(near executable: String) -> String? {
            let bin = URL(fileURLWithPath: executable).resolvingSymlinksInPath().deletingLastPathComponent()
            let installed = bin.deletingLastPathComponent().appendingPathComponent(
                "share/doc/swift-background/README.md")
            if FileManager.default.fileExists(atPath: installed.path) { return installed.path }
            var directory = bin
            while directory.path != "/" {
                let readme = directory.appendingPathComponent("README.md")
                if FileManager.default.fileExists(atPath: directory.appendingPathComponent("Package.swift").path),
                    FileManager.default.fileExists(atPath: readme.path)
                {
                    return readme.path
                }
                directory.deleteLastPathComponent()
            }
            return nil
        }

        /// `name` in this very binary's directory, however it was started: argv[0] is only
        /// "bgctl" when the shell found it on PATH, which read as "./bgctl".
        static func besideMe(_ name: String) throws -> String {
            let me =
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
                .map { URL(fileURLWithPath: $0) }
                ?? Bundle.main.executableURL?.resolvingSymlinksInPath()
                ?? URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath()
            return me.deletingLastPathComponent().appendingPathComponent(name).path
        }
    }

    struct UninstallService: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "uninstall-service",
            abstract: "Stop, disable and remove the systemd user units for bgd (service and socket).",
            discussion: """
                While the unit files are still there, systemd's user manager stops and disables the units
                it loaded from them (systemctl --user disable --now); then the files go and systemd
                forgets them (systemctl --user daemon-reload). Without a user manager to ask, the files
                and the links that enabled them are removed, and bgctl says how to stop a bgd that runs.
                """)

        func run() async throws {
            let units = [("bgd.socket", InstallService.socketUnitPath()), ("bgd.service", InstallService.unitPath())]
                .filter { FileManager.default.fileExists(atPath: $0.1) }
            guard !units.isEmpty else {
                return print("No unit at \(InstallService.unitPath()); nothing to do.")
            }
            let names = units.map(\.0).joined(separator: " ")
            let systemctl = Subprocess.onPath("systemctl")
            // The units the user manager loaded from these very files (not a bgd.service it
            // found under another XDG_CONFIG_HOME): those are the ones to stop.
            var managed: [String] = []
            var silence: String?
            for (name, path) in units {
                guard let systemctl else { break }
                let answer = Subprocess.run(systemctl, ["--user", "show", "--property=FragmentPath", "--value", name])
                guard let answer, answer.status == 0 else {
                    silence = answer?.firstLine ?? "no answer"
                    continue
                }
                if Self.samePath(answer.firstLine, path) { managed.append(name) }
            }
            var stillRunning: String?
            if let systemctl, !managed.isEmpty {
                let disable = ["--user", "disable", "--now"] + managed
                if let answer = Subprocess.run(systemctl, disable, timeout: 60), answer.status == 0 {
                    print(
                        "Stopped and disabled \(managed.joined(separator: " and ")) (systemctl \(disable.joined(separator: " ")))."
                    )
                } else {
                    stillRunning = managed.joined(separator: " ")
                    silence = "systemctl \(disable.joined(separator: " ")) failed"
                }
            } else if systemctl != nil, silence != nil {
                stillRunning = names
            }
            let links = Self.enablingLinks(of: units.map(\.1))
            for path in links + units.map(\.1) { try FileManager.default.removeItem(atPath: path) }
            print(
                "Removed \(units.map(\.1).joined(separator: " and "))"
                    + (links.isEmpty ? "." : ", and the links that enabled them: \(links.joined(separator: " "))."))
            if let stillRunning {
                print(
                    "systemd's user manager did not answer (\(silence ?? "?")); if it runs bgd, stop it now with: systemctl --user stop \(stillRunning) && systemctl --user daemon-reload"
                )
            } else if let systemctl, !managed.isEmpty {
                let reload = Subprocess.run(systemctl, ["--user", "daemon-reload"], timeout: 60)
                if let reload, reload.status == 0 {
                    print("systemd forgot them (systemctl --user daemon-reload).")
                } else {
                    print("Now: systemctl --user daemon-reload (it did not answer bgctl)")
                }
            }
        }

        static func samePath(_ a: String, _ b: String) -> Bool {
            !a.isEmpty
                && URL(fileURLWithPath: a).resolvingSymlinksInPath().path
                    == URL(fileURLWithPath: b).resolvingSymlinksInPath().path
        }

        /// What `systemctl enable` made for the units: links to them in the unit directory's
        /// `*.wants/` and `*.requires/` (default.target.wants/bgd.service, sockets.target.wants/bgd.socket).
        static func enablingLinks(of units: [String]) -> [String] {
            guard let directory = units.first.map({ ($0 as NSString).deletingLastPathComponent }),
                let entries = try? FileManager.default.contentsOfDirectory(atPath: directory)
            else { return [] }
            var links: [String] = []
            for entry in entries.sorted() where entry.hasSuffix(".wants") || entry.hasSuffix(".requires") {
                for unit in units {
                    let link = "\(directory)/\(entry)/\((unit as NSString).lastPathComponent)"
                    guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: link) else {
                        continue
                    }
                    let resolved = target.hasPrefix("/") ? target : "\(directory)/\(entry)/\(target)"
                    if samePath(resolved, unit) { links.append(link) }
                }
            }
            return links
        }
    }
}
