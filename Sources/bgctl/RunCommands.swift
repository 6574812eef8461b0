import ArgumentParser
import Background
import BackgroundModel
import Foundation

extension BGCtl {
    struct History: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "history",
            abstract: "An app's background runs: result, duration, what it cost, reason.")
        @OptionGroup var options: DaemonOptions
        @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID
        @Option(parsing: .unconditional, help: "How many runs, newest first (1 to 1000).") var limit = 20

        func validate() throws { try checkCount(limit, "--limit", in: 1...1000) }

        func run() async throws {
            if options.json { return try await options.printAnswer(.get, "/v1/apps/\(app)/history?limit=\(limit)") }
            let runs = try await options.call {
                try await $0.send(.get, "/v1/apps/\(app)/history?limit=\(limit)", as: [RunRecord].self)
            }
            guard !runs.isEmpty else { return print("\(app) has not run yet. `bgctl why \(app)` says when it will.") }
            let now = SystemClock().now
            TextFormat.table(
                header: [
                    "RUN", "STARTED", "KIND", "TRIGGER", "RESULT", "DURATION", "CPU", "PEAK MEM", "WHY", "DETAIL",
                ],
                rows: runs.map { run in
                    [
                        run.id.description, TextFormat.when(run.startedAt, now: now), run.kind?.rawValue ?? "-",
                        run.trigger.rawValue,
                        run.outcome?.rawValue ?? "running", run.duration?.humanDescription ?? "-", run.cpuDescription,
                        run.memoryDescription,
                        run.reasons.map(\.code.rawValue).joined(separator: ","),
                        TextFormat.reason(run.detail ?? "", now: now),
                    ]
                })
        }
    }

    struct Why: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "why",
            abstract: "When bgd will next wake an app, and every reason why.")
        @OptionGroup var options: DaemonOptions
        @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID

        func run() async throws {
            if options.json { return try await options.printAnswer(.get, "/v1/apps/\(app)/why") }
            let why = try await options.call {
                try await $0.send(.get, "/v1/apps/\(app)/why", as: WakeExplanation.self)
            }
            let now = SystemClock().now
            if let running = why.running {
                print(
                    "\(app) is running now (run \(running.id), started \(TextFormat.when(running.startedAt, now: now)), deadline \(TextFormat.when(running.deadline, now: now)))."
                )
            } else if let next = why.nextWake {
                print("\(app) will next be woken \(TextFormat.when(next, now: now)).")
            } else {
                print("\(app) is not planned to be woken.")
            }
            print("  fetch interval: \(why.fetchInterval)")
            for reason in why.reasons {
                print("  - \(reason.code.rawValue): \(TextFormat.reason(reason.detail, now: now))")
            }
            if let last = why.recentRuns.first {
                print(
                    "  last run: \(last.outcome?.rawValue ?? "?") \(TextFormat.when(last.startedAt, now: now))\(last.detail.map { " (\(TextFormat.reason($0, now: now)))" } ?? "")"
                )
            }
            if let decided = why.decidedAt { print("  (decided \(TextFormat.when(decided, now: now)))") }
            let waiting = why.pushes.filter { $0.state == .queued }
            let lost = why.pushes.filter { $0.state != .queued }
            if !waiting.isEmpty { print("  background pushes waiting:") }
            for push in waiting { print("    \(Self.describe(push, now: now))") }
            if !lost.isEmpty { print("  background pushes that will not wake it (last 24 hours):") }
            for push in lost { print("    \(Self.describe(push, now: now))") }
        }

        static func describe(_ push: PushRecord, now: Date) -> String {
            let tries = push.triesDescription.map { ", \($0)" } ?? ""
            let what =
                "\(push.state.rawValue) \(push.apnsID) (received \(TextFormat.when(push.receivedAt, now: now))\(tries))"
            guard let code = push.reasonCode else { return what + ": not looked at yet" }
            return what + " — \(code.rawValue): \(TextFormat.reason(push.reason ?? "", now: now))"
        }
    }

    struct Forecast: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "forecast",
            abstract:
                "The wakes bgd plans for an app over the hours ahead, if nothing new happens, and what binds each one.")
        @OptionGroup var options: DaemonOptions
        @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID
        @Option(parsing: .unconditional, help: "How many hours ahead (1 to 168).") var hours: Int = 24

        func validate() throws { try checkCount(hours, "--hours", in: 1...168) }

        func run() async throws {
            if options.json { return try await options.printAnswer(.get, "/v1/apps/\(app)/forecast?hours=\(hours)") }
            let forecast = try await options.call {
                try await $0.send(.get, "/v1/apps/\(app)/forecast?hours=\(hours)", as: WakeForecast.self)
            }
            let now = forecast.from  // bgd's clock when it answered: "in 14m" reads right whatever this one says
            print(
                "\(app): \(forecast.wakes.count) wake(s) planned in the next \(hours) h (the planner's threshold now: \(String(format: "%.2f", forecast.threshold)))."
            )
            if let earliest = forecast.earliest {
                print(
                    "  earliest allowed \(TextFormat.when(earliest, now: now)): "
                        + forecast.earliestReasons.map(\.code.rawValue).joined(separator: ", "))
            } else {
                for reason in forecast.earliestReasons {
                    print("  - \(reason.code.rawValue): \(TextFormat.reason(reason.detail, now: now))")
                }
            }
            for wake in forecast.wakes {
                print(
                    "  \(TextFormat.when(wake.at, now: now))  \(String(format: "%.2f", wake.expectedStarts))  \(TextFormat.reason(wake.reason.detail, now: now))"
                )
            }
            if let holdback = forecast.holdback {
                print("  then: \(holdback.code.rawValue): \(TextFormat.reason(holdback.detail, now: now))")
            }
        }
    }

    struct Simulate: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "simulate",
            abstract: "Make bgd do something now, or replay a trace through the policies.",
            subcommands: [Fetch.self, Trace.self])

        struct Fetch: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "fetch",
                abstract: "Wake an app for a background fetch now (Xcode's Simulate Background Fetch).")
            @OptionGroup var options: DaemonOptions
            @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID
            @Flag(help: "Return once the run has started, without waiting for its result.") var noWait = false

            func run() async throws {
                let path = "/v1/apps/\(app)/fetch" + (noWait ? "" : "?wait=120")
                if !noWait && !options.json {
                    // bgd answers the fetch only when the run ends, so "Waking" goes before it — and
                    // would be untrue for an app bgd does not know: ask about the app first.
                    _ = try await options.call { try await $0.send(.get, "/v1/apps/\(app)", as: AppSummary.self) }
                    FileHandle.standardError.write(Data("Waking \(app) for a fetch…\n".utf8))
                }
                let run = try await options.call {
                    try await $0.send(.post, path, as: RunRecord.self, timeout: .seconds(130))
                }
                if options.json {
                    try options.printJSON(run)
                } else if let outcome = run.outcome {
                    print(
                        "Run \(run.id): \(outcome.rawValue) after \(run.duration?.humanDescription ?? "?")\(run.detail.map { " — \($0)" } ?? "")"
                    )
                } else {
                    print(
                        "Run \(run.id) started (\(run.launched ? "launched the app" : "sent to the connected app")); `bgctl history \(app)` shows its result."
                    )
                }
                // A script reading --json learns the same from the status as a person from the
                // line, and why on stderr (it was an empty reason).
                if let outcome = run.outcome, !outcome.isAnswer {
                    options.fail(
                        "runNotAnswered",
                        "run \(run.id) ended \(outcome.rawValue) without the app's answer\(run.detail.map { ": \($0)" } ?? "")",
                        exit: BGCtlExit.failure)
                }
            }
        }
    }
}
