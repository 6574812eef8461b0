import ArgumentParser
import Background
import BackgroundModel
import Foundation

extension BGCtl {
    /// The machine's conditions as bgd sees them, and overrides for testing.
    struct Env: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "env",
            abstract: "Show the power and network conditions bgd plans with, or override them for testing.",
            discussion: """
                bgd reads power from /sys/class/power_supply and the network from /sys/class/net.
                Overrides survive a restart of bgd until reset:
                  bgctl env set --power battery --battery 15     # as if on a low battery
                  bgctl env set --network none                   # as if offline
                  bgctl env reset                                # back to what is sensed
                """,
            subcommands: [Show.self, Set.self, Reset.self], defaultSubcommand: Show.self)

        struct Show: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "show",
                abstract: "Show sensed, overridden and effective conditions.")
            @OptionGroup var options: DaemonOptions

            func run() async throws {
                let report = try await options.call { try await $0.send(.get, "/v1/env", as: ConditionsReport.self) }
                Env.print(report, options: options)
            }
        }

        struct Set: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "set",
                abstract: "Override conditions; 'sensed' clears one override. Others are kept.")
            @OptionGroup var options: DaemonOptions
            @Option(help: "mains, battery or sensed.") var power: String?
            @Option(parsing: .unconditional, help: "Battery level in percent (0-100), or sensed.") var battery: String?
            @Option(help: "none, metered, unmetered or sensed.") var network: String?

            func validate() throws {
                guard power != nil || battery != nil || network != nil else {
                    throw ValidationError("give at least one of --power, --battery, --network")
                }
                _ = try overrides(over: ConditionOverrides())
            }

            /// `current` with this command's changes.
            func overrides(over current: ConditionOverrides) throws -> ConditionOverrides {
                var new = current
                if let power {
                    if power == "sensed" {
                        new.power = nil
                    } else {
                        guard let value = DeviceConditions.PowerSource(rawValue: power) else {
                            throw ValidationError("--power is mains, battery or sensed, not '\(power)'")
                        }
                        new.power = value
                    }
                }
                if let battery {
                    if battery == "sensed" {
                        new.batteryLevel = nil
                    } else {
                        guard let level = Int(battery.hasSuffix("%") ? String(battery.dropLast()) : battery),
                            (0...100).contains(level)
                        else {
                            throw ValidationError(
                                "--battery is a percentage from 0 to 100, or sensed, not '\(battery)'")
                        }
                        new.batteryLevel = level
                    }
                }
                if let network {
                    if network == "sensed" {
                        new.network = nil
                    } else {
                        guard let value = DeviceConditions.Network(rawValue: network) else {
                            throw ValidationError("--network is none, metered, unmetered or sensed, not '\(network)'")
                        }
                        new.network = value
                    }
                }
                return new
            }

            func run() async throws {
                let report = try await options.call { client in
                    let current = try await client.send(.get, "/v1/env", as: ConditionsReport.self)
                    return try await client.send(
                        .put, "/v1/env", body: try overrides(over: current.overrides), as: ConditionsReport.self)
                }
                Env.print(report, options: options)
            }
        }

        struct Reset: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "reset",
                abstract: "Drop every override: plan with what is sensed.")
            @OptionGroup var options: DaemonOptions

            func run() async throws {
                let report = try await options.call { try await $0.send(.delete, "/v1/env", as: ConditionsReport.self) }
                Env.print(report, options: options)
            }
        }

        static func print(_ report: ConditionsReport, options: DaemonOptions) {
            if options.json { return (try? options.printJSON(report)) ?? () }
            func row(_ name: String, _ sensed: String, _ override: String?, _ effective: String) -> [String] {
                [name, sensed, override ?? "-", effective]
            }
            TextFormat.table(
                header: ["CONDITION", "SENSED", "OVERRIDE", "EFFECTIVE"],
                rows: [
                    row(
                        "power", report.sensed.power.rawValue, report.overrides.power?.rawValue,
                        report.effective.power.rawValue),
                    row(
                        "battery", report.sensed.batteryLevel.map { "\($0)%" } ?? "none",
                        report.overrides.batteryLevel.map { "\($0)%" },
                        report.effective.batteryLevel.map { "\($0)%" } ?? "none"),
                    row(
                        "network", report.sensed.network.rawValue, report.overrides.network?.rawValue,
                        report.effective.network.rawValue),
                ])
            Swift.print(
                "sensed from: \(report.sources.isEmpty ? "nothing found" : report.sources.joined(separator: ", "))")
        }
    }
}
