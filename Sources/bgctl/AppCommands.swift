import ArgumentParser
import Background
import BackgroundModel
import BackgroundProviderKeys
import Foundation

extension BGCtl {
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "Is bgd running, and what is it doing?")
        @OptionGroup var options: DaemonOptions

        func run() async throws {
            if options.json { return try await options.printAnswer(.get, "/v1/status") }
            let status = try await options.call { try await $0.send(.get, "/v1/status", as: DaemonStatus.self) }
            print(
                "bgd \(status.version) (pid \(status.processID)), up \(status.now.duration(since: status.startedAt).humanDescription)"
            )
            print("  state:   \(status.stateDirectory)")
            print("  socket:  \(status.socketPath)")
            print("  apps:    \(status.appCount), runs in flight: \(status.runningRuns)")
            print(
                "  next wake: \(status.nextEvaluation.map { TextFormat.when($0, now: status.now) } ?? "none planned")")
            if let confinement = status.appConfinement { print("  files:   \(confinement)") }
            if let processes = status.appProcesses { print("  processes: \(processes)") }
            print("  push gateway: \(status.pushGateway ?? "off")")
        }
    }

    struct Apps: AsyncParsableCommand {
        static let configuration = CommandConfiguration(commandName: "apps", abstract: "List the registered apps.")
        @OptionGroup var options: DaemonOptions

        func run() async throws {
            if options.json { return try await options.printAnswer(.get, "/v1/apps") }
            let apps = try await options.call { try await $0.send(.get, "/v1/apps", as: [AppSummary].self) }
            guard !apps.isEmpty else {
                return print(
                    "No apps registered. Register one with: bgctl register APP-ID --interval minimum -- /path/to/app")
            }
            let now = SystemClock().now
            let rows = apps.map { app in
                [
                    app.id.rawValue, app.fetchInterval.description,
                    app.lifecycle.map { Self.describe($0, now: now) } ?? (app.isConnected ? "connected" : "-"),
                    app.lastRun.map {
                        "\($0.outcome?.rawValue ?? "running") \(TextFormat.when($0.startedAt, now: now))"
                    } ?? "never",
                    app.nextWake.map { TextFormat.when($0, now: now) } ?? "not planned",
                ]
            }
            TextFormat.table(header: ["APP", "INTERVAL", "STATE", "LAST RUN", "NEXT WAKE"], rows: rows)
        }

        /// "background, 2 tasks, 12s left" / "suspended (pid 123)".
        static func describe(_ status: LifecycleStatus, now: Date) -> String {
            var words = status.state.rawValue
            if !status.tasks.isEmpty { words += ", \(status.tasks.count) task\(status.tasks.count == 1 ? "" : "s")" }
            if let deadline = status.deadline, status.state == .background {
                words += ", \(max(0, Int(deadline.timeIntervalSince(now).rounded(.up))))s left"
            }
            if status.state == .suspended, let pid = status.processID { words += " (pid \(pid))" }
            return words
        }
    }

    struct Register: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "register",
            abstract: "Register an app and print its token.",
            discussion: """
                The launch command comes after `--`, as argv (no shell): bgd runs it to wake the app.
                  bgctl register com.example.newsfeed --interval minimum -- /path/to/NewsFeed
                """)
        @OptionGroup var options: DaemonOptions
        @Argument(help: "The app id, reverse-DNS (com.example.app).", transform: parseAppID) var app: AppID?
        @Option(
            help: "Minimum fetch interval: never (default), minimum, or a duration like 30m.", transform: parseInterval)
        var interval: FetchInterval?
        @Option(
            help:
                "Register from the app's manifest (JSON: id, launch, interval, taskIdentifiers, pushTopic) instead of arguments; the same file again changes nothing, a changed one updates the app keeping its history."
        )
        var manifest: String?
        @Option(
            name: .customLong("task-identifier"),
            help:
                "A BGTaskScheduler identifier the app may submit requests for (repeat for more), like BGTaskSchedulerPermittedIdentifiers."
        )
        var taskIdentifiers: [String] = []
        @Flag(help: "Print only the token.") var quiet = false
        @Flag(
            help:
                "Change a registered app's launch command (and task identifiers, interval if given), keeping its history, usage, outbox, device token, container and token."
        )
        var replace = false
        @Argument(parsing: .postTerminator, help: "The launch command, after --.") var command: [String] = []

        func validate() throws {
            if manifest != nil {
                guard command.isEmpty, interval == nil, taskIdentifiers.isEmpty, !replace else {
                    throw ValidationError(
                        "with --manifest, the manifest says it all: no launch command, --interval, --task-identifier or --replace"
                    )
                }
                return
            }
            guard app != nil else {
                throw ValidationError("give the app id, e.g. bgctl register com.example.app -- /path/to/app")
            }
            guard !command.isEmpty else {
                throw ValidationError("give the launch command after --, e.g. -- /usr/local/bin/myapp --background")
            }
            guard LaunchCommand(command) != nil else { throw ValidationError(LaunchCommand.requirement) }
            for identifier in taskIdentifiers where !TaskRequest.isValidIdentifier(identifier) {
                throw ValidationError(
                    "--task-identifier '\(identifier)': use 1 to 200 letters, digits, '.', '-' or '_'")
            }
        }

        func run() async throws {
            if let manifest {
                return try await register(
                    from: options.input { () throws(InputFileProblem) in try AppManifest.load(manifest) })
            }
            guard let app else { throw ValidationError("give the app id") }
            var argv = command
            // bgd runs the command from the app's own directory: make a relative path absolute now.
            if argv[0].contains("/") && !argv[0].hasPrefix("/") {
                argv[0] = URL(fileURLWithPath: argv[0]).standardizedFileURL.path
            }
            guard let launch = LaunchCommand(argv) else { throw ValidationError(LaunchCommand.requirement) }
            let registration = RegisterAppRequest(
                id: app, launchCommand: launch, fetchInterval: interval,
                taskIdentifiers: taskIdentifiers.isEmpty ? nil : taskIdentifiers)
            let registered = try await options.call {
                try await $0.send(
                    replace ? .put : .post, replace ? "/v1/apps/\(app)" : "/v1/apps", body: registration,
                    as: RegisteredApp.self)
            }
            if options.json { return try options.printJSON(registered) }
            if quiet { return print(registered.token) }
            print(
                "\(replace ? "Updated" : "Registered") \(registered.app.id) (fetch interval: \(registered.app.fetchInterval))."
            )
            print("token: \(registered.token)")
            print(
                "A foreground app connects with BackgroundApplication(appID:) (the token is in its container), or BGD_APP_TOKEN=\(registered.token); bgctl token \(registered.app.id) shows it again."
            )
        }

        /// Idempotent: registers the app if bgd does not know it, updates it (keeping its history)
        /// if the manifest changed, and changes nothing if it did not.
        private func register(from manifest: AppManifest) async throws {
            let id = manifest.registration.id
            if let app, app != id {
                options.fail("manifestMismatch", "the manifest is for \(id), not \(app)", exit: BGCtlExit.usage)
            }
            let current: AppSummary?
            do {
                current = try await options.client.send(.get, "/v1/apps/\(id)", as: AppSummary.self)
            } catch let error as BackgroundError where error.apiErrorCode == .unknownApp {
                current = nil
            } catch let error as BackgroundError {
                options.fail(error)
            }
            if let current, manifest.matches(current) {
                if options.json { return try options.printJSON(current) }
                // --quiet prints the token whatever happened: `TOKEN=$(bgctl register --manifest
                // app.json --quiet)` run a second time took this sentence for the token.
                if quiet {
                    let answer = try await options.call {
                        try await $0.send(.get, "/v1/apps/\(id)/token", as: AppTokenAnswer.self)
                    }
                    return print(answer.token)
                }
                return print("\(id) is registered as its manifest says; nothing changed.")
            }
            let registered = try await options.call {
                try await $0.send(
                    current == nil ? .post : .put, current == nil ? "/v1/apps" : "/v1/apps/\(id)",
                    body: manifest.registration, as: RegisteredApp.self)
            }
            if options.json { return try options.printJSON(registered) }
            if quiet { return print(registered.token) }
            print(
                current == nil
                    ? "Registered \(id) from its manifest (fetch interval: \(registered.app.fetchInterval)); bgctl token \(id) shows its token."
                    : "Updated \(id) from its manifest; its history, usage, outbox and token stay.")
        }
    }

    struct Token: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "token",
            abstract: "Show an app's token, or give it a new one (--rotate: the old one is refused at once).")
        @OptionGroup var options: DaemonOptions
        @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID
        @Flag(help: "Make a new token; connections made with the old one are closed.") var rotate = false

        func run() async throws {
            let answer = try await options.call {
                try await $0.send(rotate ? .post : .get, "/v1/apps/\(app)/token", as: AppTokenAnswer.self)
            }
            if options.json { return try options.printJSON(answer) }
            print(answer.token)
        }
    }

    struct Unregister: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "unregister",
            abstract: "Remove an app, its history and its directory.")
        @OptionGroup var options: DaemonOptions
        @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID

        func run() async throws {
            try await options.call { try await $0.send(.delete, "/v1/apps/\(app)") }
            options.done("unregister", ["app": app.rawValue], sentence: "Unregistered \(app).")
        }
    }

    struct SetInterval: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set-interval", abstract: "Change an app's minimum fetch interval (never, minimum, 30m, ...).")
        @OptionGroup var options: DaemonOptions
        @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID
        @Argument(help: "never, minimum, or a duration from 1s to 30d such as 15m or 2h.", transform: parseInterval)
        var interval: FetchInterval

        func run() async throws {
            let summary = try await options.call {
                try await $0.send(
                    .put, "/v1/apps/\(app)/fetch-interval", body: FetchIntervalUpdate(interval: interval),
                    as: AppSummary.self)
            }
            if options.json { return try options.printJSON(summary) }
            print("\(app): fetch interval is now \(summary.fetchInterval).")
        }
    }

    struct Usage: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "usage",
            abstract: "What bgd has learnt about when an app is opened.")
        @OptionGroup var options: DaemonOptions
        @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID
        @Flag(help: "Forget every recorded open of the app.") var reset = false

        func run() async throws {
            if reset {
                try await options.call { try await $0.send(.delete, "/v1/apps/\(app)/usage") }
                options.done("forgetOpens", ["app": app.rawValue], sentence: "Forgot every recorded open of \(app).")
                return
            }
            if options.json { return try await options.printAnswer(.get, "/v1/apps/\(app)/usage") }
            let usage = try await options.call {
                try await $0.send(.get, "/v1/apps/\(app)/usage", as: UsageSummary.self)
            }
            guard usage.opensRecorded > 0 else {
                return print(
                    "\(app) has no recorded opens yet: apps report them with applicationDidBecomeActive(), or `bgctl open \(app)`."
                )
            }
            print(
                "\(app): \(usage.opensRecorded) opens recorded, \(String(format: "%.1f", usage.opensPerDay)) a day lately, in \(String(format: "%.1f", usage.sessionsPerDay)) sessions a day"
            )
            print("  busiest times of day (UTC), session starts a day:")
            for slot in usage.busiestSlots {
                print("    \(slot.start)  \(String(format: "%.2f", slot.sessionsPerDay))")
            }
            if let chance = usage.openChance {
                print(
                    "  chance of an open within \(chance.within.humanDescription) from now: \(String(format: "%.2f", chance.probability)) (the user's wake threshold: \(String(format: "%.2f", chance.threshold)))"
                )
                print(
                    chance.factors.isEmpty
                        ? "  nothing learned yet: the model learns from the moments between opens"
                        : "  what moved it most (pull on the log-odds):")
                for factor in chance.factors {
                    print("    \(String(format: "%+.2f", factor.pull))  \(factor.feature)")
                }
                if let factor = chance.timeOfDayFactor, abs(factor - 1) >= 0.005 {
                    print(
                        "  scaled ×\(String(format: "%.2f", factor)) for this time of day: the model's estimates then came true \(String(format: "%.2f", factor))× as often as the whole day's, last week"
                    )
                }
            }
        }
    }

    struct Open: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "open",
            abstract: "Record that the user opened an app (as the SDK does).")
        @OptionGroup var options: DaemonOptions
        @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID

        func run() async throws {
            try await options.call { try await $0.send(.post, "/v1/apps/\(app)/opens") }
            options.done("open", ["app": app.rawValue], sentence: "Recorded an open of \(app).")
        }
    }
}
