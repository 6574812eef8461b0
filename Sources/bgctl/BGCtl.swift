import ArgumentParser
import Background
import BackgroundModel
import Foundation

/// The command-line face of bgd: register apps, see what it decided and why, poke it.
@main
struct BGCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bgctl",
        abstract: "Drive and inspect bgd, the swift-background daemon.",
        version: "0.1.0",
        subcommands: [
            Status.self, Apps.self, Register.self, Token.self, Unregister.self, SetInterval.self, History.self, Why.self,
            Forecast.self,
            Open.self, Usage.self, Env.self, Download.self, Transfers.self, Push.self, Tasks.self, Simulate.self,
            Dashboard.self, InstallService.self, UninstallService.self,
        ])
}

/// Flags every command shares.
struct DaemonOptions: ParsableArguments {
    @Option(help: "bgd's socket (default: $BGD_SOCKET, else $XDG_RUNTIME_DIR/bgd/bgd.sock).")
    var socket: String?

    @Flag(help: "Print JSON instead of text, for scripts.")
    var json = false

    var client: DaemonClient { DaemonClient(socketPath: socket ?? DaemonLocation.defaultSocketPath()) }

    /// Runs a call to bgd; a failure is printed as a sentence and ends the command with status 1.
    func call<T>(_ body: (DaemonClient) async throws -> T) async throws -> T {
        do {
            return try await body(client)
        } catch let error as BackgroundError {
            FileHandle.standardError.write(Data("bgctl: \(error.reason)\n".utf8))
            throw ExitCode.failure
        }
    }

    func printJSON(_ value: some Encodable) throws {
        print(String(decoding: try WireCoding.makeEncoder().encode(value), as: UTF8.self))
    }
}

func parseAppID(_ text: String) throws -> AppID {
    guard let id = AppID(rawValue: text) else { throw ValidationError("'\(text)': \(AppID.requirement)") }
    return id
}

func parseInterval(_ text: String) throws -> FetchInterval {
    guard let interval = FetchInterval(parsing: text) else {
        throw ValidationError("'\(text)': \(FetchInterval.requirement)")
    }
    return interval
}
