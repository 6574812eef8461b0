import ArgumentParser
import BackgroundModel
import Foundation

extension BGCtl {
    struct Tasks: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "tasks",
            abstract:
                "BGTaskScheduler requests and finite-length background tasks: what waits, what runs, and time left.",
            subcommands: [List.self, Run.self, Expire.self], defaultSubcommand: List.self)

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "list", abstract: "Pending requests, running tasks with time left, apps' background tasks."
            )
            @OptionGroup var options: DaemonOptions

            func run() async throws {
                if options.json { return try await options.printAnswer(.get, "/v1/tasks") }
                let overview = try await options.call { try await $0.send(.get, "/v1/tasks", as: TasksOverview.self) }
                let now = overview.now
                if overview.pending.isEmpty && overview.running.isEmpty
                    && overview.lifecycles.allSatisfy({ $0.tasks.isEmpty })
                {
                    print("No task requests pending, no tasks running.")
                }
                if !overview.running.isEmpty {
                    print("Running:")
                    TextFormat.table(
                        header: ["APP", "TASK", "KIND", "RUN", "TIME LEFT"],
                        rows: overview.running.map {
                            [
                                $0.app.rawValue, $0.identifier, $0.kind.rawValue, $0.run.id.description,
                                "\(max(0, Int($0.run.deadline.timeIntervalSince(now))))s",
                            ]
                        })
                }
                if !overview.pending.isEmpty {
                    print("Pending:")
                    TextFormat.table(
                        header: ["APP", "TASK", "KIND", "EARLIEST", "WAITING FOR"],
                        rows: overview.pending.map {
                            [
                                $0.app.rawValue, $0.request.identifier, $0.request.kind.rawValue,
                                $0.request.earliestBeginDate.map { TextFormat.when($0, now: now) } ?? "-",
                                $0.waitingReason.map { "\($0.code.rawValue): \(TextFormat.reason($0.detail, now: now))" } ?? "starting",
                            ]
                        })
                }
                let holding = overview.lifecycles.filter { !$0.tasks.isEmpty || $0.state == .suspended }
                if !holding.isEmpty {
                    print("Background time:")
                    TextFormat.table(
                        header: ["APP", "STATE", "BACKGROUND TASKS", "WHY"],
                        rows: holding.map { status in
                            [
                                status.app.rawValue, BGCtl.Apps.describe(status, now: now),
                                status.tasks.map { "\($0.id) \($0.name ?? "")" }.joined(separator: ", "),
                                status.reason.map { "\($0.code.rawValue): \(TextFormat.reason($0.detail, now: now))" } ?? "-",
                            ]
                        })
                }
            }
        }

        struct Run: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "run",
                abstract: "Start an app's pending task now (Apple's _simulateLaunchForTaskWithIdentifier).")
            @OptionGroup var options: DaemonOptions
            @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID
            @Argument(help: "The task identifier.") var identifier: String

            func run() async throws {
                let run = try await options.call {
                    try await $0.send(
                        .post, "/v1/tasks/run", body: TaskTarget(app: app, identifier: identifier), as: RunRecord.self)
                }
                if options.json { return try options.printJSON(run) }
                print("Started \(identifier) for \(app) (run \(run.id)); `bgctl history \(app)` shows how it ends.")
            }
        }

        struct Expire: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "expire",
                abstract:
                    "Expire a running task now: its expiration handler runs (Apple's _simulateExpirationForTaskWithIdentifier)."
            )
            @OptionGroup var options: DaemonOptions
            @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID
            @Argument(help: "The task identifier.") var identifier: String

            func run() async throws {
                let task = try await options.call {
                    try await $0.send(
                        .post, "/v1/tasks/expire", body: TaskTarget(app: app, identifier: identifier),
                        as: RunningTask.self)
                }
                if options.json { return try options.printJSON(task) }
                print(
                    "Told \(app) that \(identifier) (run \(task.run.id)) expires; it is ended unless it completes within the expiration lead."
                )
            }
        }
    }
}
