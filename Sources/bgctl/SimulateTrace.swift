import ArgumentParser
import BackgroundModel
import BackgroundPolicy
import BackgroundProviderKeys
import Foundation

extension BGCtl.Simulate {
    /// Replays a trace of real app opens through the scheduling policies, in virtual time.
    struct Trace: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "trace",
            abstract: "Replay an app-open trace (CSV user,app,open_utc) through the fetch policies and score them.",
            discussion: """
                Each policy decides wakes online, learning only from opens before the simulated now; \
                learned runs the same model and planner as bgd by default, adaptive those of \
                bgd --fetch-planner adaptive. Scored as the trace README says: content age at each \
                open, after a 7-day warm-up per user.
                """)

        @Argument(help: "The trace: CSV with columns user, app, open_utc (Unix seconds).") var file: String
        @Option(
            name: .customLong("policy"),
            help:
                "Policies to run (default: all): \(Self.policyNames.joined(separator: ", "))."
        )
        var policies: [String] = []
        @Option(help: "Write every wake the last policy decided as CSV user,app,wake_utc.") var wakesOut: String?
        @Option(
            help:
                "With --policy learned: write every moment its model scored as CSV user,app,moment_utc,estimate,opened (within the hour after) and the model's features, for study outside it."
        )
        var momentsOut: String?
        @Option(parsing: .unconditional, help: "The users' offset from UTC in hours, for time-of-day habits.")
        var utcOffset: Double = 0
        @Option(
            help:
                "The users' time zone (e.g. America/New_York): learned, hour-of-day and reopen read the time of day in the offset of each moment, across daylight-saving changes, as bgd does; instead of --utc-offset."
        )
        var timeZone: String?
        @Option(
            parsing: .unconditional,
            help:
                "Wakes a day per expected open a day: the budget of the planners (learned, hour-of-day, reopen, adaptive; default 0.9)."
        )
        var wakesPerOpen: Double?
        /// Local time as the learned planner reads it: in the zone's offset of each moment, or a fixed one.
        var history: OpenHistory.Configuration {
            .init(utcOffset: .seconds(utcOffset * 3600), timeZone: timeZone.flatMap(TimeZone.init(identifier:)))
        }
        /// The budget asked for, or the planners' own.
        var budget: Double { wakesPerOpen ?? 0.9 }
        @Option(
            parsing: .unconditional,
            help: "10-minute slots each side that share a slot's count (adaptive's time-of-day smoothing).")
        var smoothing: Int = 1
        @Option(
            parsing: .unconditional,
            help: "Expected session starts a wake must serve, before the budget adjusts it (adaptive's).")
        var initialThreshold: Double = 0.3
        @Flag(help: "Print JSON instead of a table.") var json = false
        @Flag(
            help:
                "Run every planner (learned, hour-of-day, reopen, adaptive; or those --policy names) at wakes-per-open 0.5, 1, 1.5, 2, 3 and 4 and print the frontier beside the oracle."
        )
        var frontier = false
        @Flag(
            help:
                "Measure the learned planner's cost per user of the trace: rebuilding it from the opens (as bgd does at start) and one planning pass over every app."
        )
        var planningCost = false

        func validate() throws {
            for name in policies where !Self.policyNames.contains(name) {
                throw ValidationError(
                    "unknown policy '\(name)'; choose from \(Self.policyNames.joined(separator: ", "))")
            }
            if frontier, let other = policies.first(where: { !FrontierReport.plannerNames.contains($0) }) {
                throw ValidationError(
                    "--frontier runs the planners \(FrontierReport.plannerNames.joined(separator: ", ")); '\(other)' is not one"
                )
            }
            if momentsOut != nil, frontier || policies != [FrontierReplay.Planner.learned.rawValue] {
                throw ValidationError(
                    "--moments-out records the learned planner's model: use it with --policy learned alone, without --frontier"
                )
            }
            if let timeZone {
                guard TimeZone(identifier: timeZone) != nil else {
                    throw ValidationError(
                        "--time-zone '\(timeZone)' is not a time zone this system knows (e.g. Europe/Berlin)")
                }
                guard utcOffset == 0 else { throw ValidationError("give --time-zone or --utc-offset, not both") }
            }
            guard (-14...14).contains(utcOffset) else {
                throw ValidationError("--utc-offset is in hours, from -14 to 14")
            }
            // Each of these runs alone: the others' options would be taken and not used.
            if frontier, wakesPerOpen != nil || wakesOut != nil {
                throw ValidationError(
                    "--frontier runs its own budgets (0.5 to 4 wakes per open) and writes no wakes: leave out --wakes-per-open and --wakes-out"
                )
            }
            if planningCost, frontier || !policies.isEmpty || wakesOut != nil || momentsOut != nil {
                throw ValidationError(
                    "--planning-cost measures the learned planner alone: leave out --frontier, --policy, --wakes-out and --moments-out"
                )
            }
            guard budget > 0, budget <= 100 else {
                throw ValidationError("--wakes-per-open must be in (0, 100]")
            }
            guard (0...36).contains(smoothing) else {
                throw ValidationError("--smoothing is a number of slots from 0 to 36")
            }
            guard WakeThreshold.range.contains(initialThreshold) else {
                throw ValidationError("--initial-threshold must be within \(WakeThreshold.range)")
            }
        }

        /// The reference policies and the planners under the online budget (`--wakes-per-open`).
        static let policyNames =
            TraceReplay.Policy.allCases.map(\.rawValue) + FrontierReplay.Planner.allCases.map(\.rawValue)

        func run() throws {
            let trace = readTrace()
            if frontier {
                try printFrontier(of: trace)
                return
            }
            if planningCost {
                let planners = FrontierReplay(history: history)
                let cost = PlanningCost.measure(
                    trace: trace, configuration: planners.learnedConfiguration(wakesPerOpen: budget))
                return json ? try printJSON(cost) : cost.printTable()
            }
            let chosen = policies.isEmpty ? Self.policyNames : policies  // all, as the help says: bgd's own too
            let planners = FrontierReplay(history: history)
            let replay = TraceReplay(
                learning: learning, planner: .init(wakesPerOpen: budget), initialThreshold: initialThreshold)
            var results: [(String, FreshnessScore)] = []
            var lastWakes: [AppOpenTrace.Key: [Date]] = [:]
            for policy in chosen {
                if !json {
                    FileHandle.standardError.write(
                        Data("Replaying \(TextFormat.count(trace.openCount, "open")) through \(policy)…\n".utf8))
                }
                if let reference = TraceReplay.Policy(rawValue: policy) {
                    lastWakes = replay.wakes(for: trace, policy: reference)
                    results.append((policy, FreshnessScore(trace: trace, wakes: lastWakes)))
                } else if let planner = FrontierReplay.Planner(rawValue: policy) {
                    if planner == .learned, let momentsOut {
                        lastWakes = writeMoments(of: trace, replaying: planners, to: momentsOut)
                    } else {
                        lastWakes = planners.wakes(for: trace, planner: planner, wakesPerOpen: budget)
                    }
                    results.append((policy, FreshnessScore.strict(trace: trace, wakes: lastWakes)))
                }
            }
            if let wakesOut { writeWakes(lastWakes, to: wakesOut) }
            try printScores(results)
        }

        private var learning: UsageLearner.Configuration {
            .init(usage: .init(utcOffset: .seconds(utcOffset * 3600), smoothing: smoothing))
        }

        private func readTrace() -> AppOpenTrace {
            inputOrFail(json: json) { () throws(InputFileProblem) in
                switch AppOpenTrace.parse(csv: try InputFile.text(file, what: "a CSV trace", limit: 256 << 20)) {
                case .success(let parsed): return parsed
                case .failure(let error): throw InputFileProblem(.malformed, "\(file): \(error)")
                }
            }
        }

        private func printFrontier(of trace: AppOpenTrace) throws {
            let report = FrontierReport.make(
                trace: trace, adaptive: TraceReplay(learning: learning, initialThreshold: initialThreshold),
                frontier: FrontierReplay(history: history),
                planners: policies.isEmpty ? FrontierReport.plannerNames : policies,
                progress: { step in
                    if !json { FileHandle.standardError.write(Data("Replaying \(step)\n".utf8)) }
                })
            if json { try printJSON(report) } else { report.printTable() }
        }

        private func printJSON(_ value: some Encodable) throws {
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
            print(String(decoding: try encoder.encode(value), as: UTF8.self))
        }

        private func printScores(_ results: [(String, FreshnessScore)]) throws {
            if json {
                let rows = results.map { policy, score in
                    [
                        "policy": policy, "opens": "\(score.opensScored)",
                        "medianAgeMinutes": minutes(score.medianAge), "p90AgeMinutes": minutes(score.p90Age),
                        "fresh15": String(format: "%.3f", score.freshWithin15Minutes),
                        "fresh60": String(format: "%.3f", score.freshWithin60Minutes),
                        "wakesPerUserDay": String(format: "%.1f", score.wakesPerUserDay),
                    ]
                }
                let encoder = JSONEncoder()
                encoder.outputFormatting = [.sortedKeys, .prettyPrinted]
                print(String(decoding: try encoder.encode(rows), as: UTF8.self))
                return
            }
            TextFormat.table(
                header: ["POLICY", "OPENS", "MEDIAN AGE", "P90 AGE", "FRESH ≤15M", "FRESH ≤60M", "WAKES/USER-DAY"],
                rows: results.map { policy, score in
                    [
                        policy, "\(score.opensScored)", minutes(score.medianAge) + " min",
                        minutes(score.p90Age) + " min",
                        String(format: "%.3f", score.freshWithin15Minutes),
                        String(format: "%.3f", score.freshWithin60Minutes),
                        String(format: "%.1f", score.wakesPerUserDay),
                    ]
                })
        }

        private func minutes(_ duration: Duration) -> String { String(format: "%.1f", duration.seconds / 60) }

        /// Replays the learned planner, writing every moment its model scored to `path` as CSV,
        /// one user at a time: who, which app, when, the estimate, whether it came true, and the
        /// features the estimate was made from. Its wakes.
        private func writeMoments(
            of trace: AppOpenTrace, replaying planners: FrontierReplay, to path: String
        ) -> [AppOpenTrace.Key: [Date]] {
            do {
                guard FileManager.default.createFile(atPath: path, contents: nil),
                    let file = FileHandle(forWritingAtPath: path)
                else {
                    failCommand(
                        "fileUnwritable",
                        "cannot write \(path): cannot create it (is its directory there and writable?)",
                        json: json, exit: BGCtlExit.failure)
                }
                defer { try? file.close() }
                let header =
                    ["user", "app", "moment_utc", "estimate", "opened"] + OpenPredictor.Feature.allCases.map(\.rawValue)
                try file.write(contentsOf: Data((header.joined(separator: ",") + "\n").utf8))
                return try planners.learnedMoments(for: trace, wakesPerOpen: budget) { moments in
                    var text = ""
                    for labelled in moments {
                        let moment = labelled.moment
                        let fields =
                            [
                                labelled.user, moment.app, "\(Int64(moment.at.rounded()))", "\(moment.estimate)",
                                labelled.opened ? "1" : "0",
                            ] + moment.features.map { "\($0)" }
                        text += fields.joined(separator: ",") + "\n"
                    }
                    try file.write(contentsOf: Data(text.utf8))
                }
            } catch {
                failCommand(
                    "fileUnwritable", "cannot write \(path): \(error.localizedDescription)", json: json,
                    exit: BGCtlExit.failure)
            }
        }

        private func writeWakes(_ wakes: [AppOpenTrace.Key: [Date]], to path: String) {
            var lines = ["user,app,wake_utc"]
            for key in wakes.keys.sorted() {
                for wake in wakes[key] ?? [] {
                    lines.append("\(key.user),\(key.app),\(Int64(wake.timeIntervalSince1970.rounded()))")
                }
            }
            do {
                try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
            } catch {
                failCommand(
                    "fileUnwritable", "cannot write \(path): \(error.localizedDescription)", json: json,
                    exit: BGCtlExit.failure)
            }
        }
    }
}
