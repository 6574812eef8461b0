import ArgumentParser
import Background
import BackgroundModel
import BackgroundProviderKeys
import Foundation

/// The command-line face of bgd: register apps, see what it decided and why, poke it.
@main
struct BGCtl: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bgctl",
        abstract: "Drive and inspect bgd, the swift-background daemon.",
        discussion: """
            Every command that talks to bgd takes --json: its answer as JSON on stdout, and a \
            failure as {"error": code, "reason": sentence} on stderr.

            Exit status: 0 done; 1 anything else; 3 no such app, transfer, task or key; 4 refused \
            by bgd's policy or state (a conflict, a limit, a full disk); 5 a download that ended \
            failed or cancelled, or was paused while watched; 64 bad usage; 65 a malformed request or file; 66 a file that \
            cannot be read; 69 bgd not running, its socket (or push gateway) unreachable, or no answer \
            in time; 77 \
            the operator's or provider's credential missing or wrong, or bgd's socket or token \
            another user's.
            """,
        version: "0.1.0",
        subcommands: [
            Status.self, Apps.self, Register.self, Token.self, Unregister.self, SetInterval.self, History.self,
            Why.self,
            Forecast.self,
            Open.self, Usage.self, Env.self, Download.self, Transfers.self, Push.self, Tasks.self, Simulate.self,
            Dashboard.self, InstallService.self, UninstallService.self,
        ])

    /// Argument-parser's own main, but a usage error under `--json` is said as JSON on stderr
    /// (`{"error": "usage", "reason": …}`, status 64), as every other failure is: a script that
    /// asked for JSON reads JSON whatever went wrong.
    static func main() async {
        do {
            var command = try parseAsRoot()
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
        } catch {
            let status = exitCode(for: error)
            // bgctl's own --json, not one of the app's arguments after `--`.
            if status != .success, CommandLine.arguments.dropFirst().prefix(while: { $0 != "--" }).contains("--json") {
                failCommand(
                    status == .validationFailure ? "usage" : "failed", message(for: error), json: true,
                    exit: status.rawValue)
            }
            exit(withError: error)
        }
    }
}

/// Flags every command shares.
struct DaemonOptions: ParsableArguments {
    @Option(
        help:
            "bgd's socket (default: $BGD_SOCKET, else $XDG_RUNTIME_DIR/bgd/bgd.sock, else /run/user/UID/bgd/bgd.sock if there, else run/bgd.sock in bgd's state directory)."
    )
    var socket: String?

    @Flag(help: "Print JSON instead of text, for scripts.")
    var json = false

    @Flag(help: "Print tables whole instead of fitting them to the terminal.")
    var full = false

    func validate() throws {
        TextFormat.showEverything = full
        if let socket, socket.isEmpty { throw ValidationError("--socket is a path; leave it out for the default") }
    }

    /// Each request on a connection of its own, without an event loop: bgctl asks and exits.
    var client: DaemonClient {
        DaemonClient(socketPath: socket ?? DaemonLocation.defaultSocketPath(), transport: .direct)
    }

    /// Runs a call to bgd; a failure is printed as a sentence (as `{"error", "reason"}` with
    /// `--json`) on stderr and ends the command with the status for its cause (`BGCtlExit`).
    func call<T>(_ body: (DaemonClient) async throws -> T) async throws -> T {
        do {
            return try await body(client)
        } catch let error as BackgroundError {
            fail(error)
        }
    }

    /// Says why a call to bgd failed, with its code and the status for its cause, and exits.
    func fail(_ error: BackgroundError) -> Never {
        let code =
            error.apiCode
            ?? (error.isDaemonUnreachable
                ? "daemonUnreachable"
                : error.isDaemonUnresponsive
                    ? "daemonUnresponsive" : error.isSocketNotPermitted ? "socketNotPermitted" : "failed")
        fail(code, unreadableTokenReason(for: error) ?? error.reason, exit: BGCtlExit.status(for: error))
    }

    /// bgd's 401 tells an HTTP client to send the operator token "or use bgctl"; to bgctl run by a
    /// user who may connect (a group socket) but not read the token, say that instead.
    private func unreadableTokenReason(for error: BackgroundError) -> String? {
        let path = DaemonLocation.operatorTokenPath(socketPath: client.socketPath)
        guard error.httpStatus == 401, FileManager.default.fileExists(atPath: path),
            !FileManager.default.isReadableFile(atPath: path)
        else { return nil }
        return "cannot read bgd's operator token \(path) (permission denied): bgctl acts as bgd's operator, "
            + "so run it as the user bgd runs as"
    }

    /// Says why the command failed, on stderr, and exits with `status`.
    func fail(_ code: String, _ reason: String, exit status: Int32) -> Never {
        failCommand(code, reason, json: json, exit: status)
    }

    /// Reads an input file with `body`; a file it cannot use ends the command with its reason.
    func input<T>(_ body: () throws(InputFileProblem) -> T) -> T {
        inputOrFail(json: json, body)
    }

    /// Prints bgd's JSON answer as it came (`--json`): nothing decoded, nothing rounded.
    func printAnswer(_ method: DaemonClient.Method, _ path: String) async throws {
        let data = try await call { try await $0.sendForJSON(method, path) }
        FileHandle.standardOutput.write(data + Data("\n".utf8))
    }

    func printJSON(_ value: some Encodable) throws {
        print(String(decoding: try WireCoding.makeEncoder().encode(value), as: UTF8.self))
    }

    /// What a command that changes something but has no record to show says it did: `sentence`,
    /// or with `--json` an object naming the action and what it acted on — so every command
    /// answers a script with JSON, not with nothing.
    func done(_ action: String, _ subject: [String: String], sentence: String) {
        guard json else { return print(sentence) }
        let object = subject.merging(["done": action]) { $1 }
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        print(String(decoding: data, as: UTF8.self))
    }
}

/// Says why the command failed, on stderr (as `{"error", "reason"}` with `--json`), and exits
/// with `status` — without the usage ArgumentParser would print after an error thrown from run().
func failCommand(_ code: String, _ reason: String, json: Bool, exit status: Int32) -> Never {
    if json {
        let object = ["error": code, "reason": reason]
        let data = (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])) ?? Data()
        FileHandle.standardError.write(data + Data("\n".utf8))
    } else {
        FileHandle.standardError.write(Data("bgctl: \(reason)\n".utf8))
    }
    Foundation.exit(status)
}

/// Runs `body`, which reads a file the command was given; a file it cannot use is no usage
/// mistake, so it ends the command with the file's problem and sysexits' status (65 or 66).
func inputOrFail<T>(json: Bool, _ body: () throws(InputFileProblem) -> T) -> T {
    do {
        return try body()
    } catch {
        failCommand(
            error.code, error.description, json: json,
            exit: error.kind == .unreadable ? BGCtlExit.noInput : BGCtlExit.badRequest)
    }
}

func parseAppID(_ text: String) throws -> AppID {
    guard let id = AppID(rawValue: text) else { throw ValidationError("'\(text)': \(AppID.requirement)") }
    return id
}

/// A count bgd takes within `range`, checked here so a bad one is a usage error naming the option
/// (64), not a request bgd finds malformed (65). Such options parse `.unconditional`ly, so
/// `--limit -1` reaches this check instead of reading as a flag ("Missing value").
func checkCount(_ value: Int, _ option: String, in range: ClosedRange<Int>) throws {
    guard range.contains(value) else {
        throw ValidationError("\(option) is from \(range.lowerBound) to \(range.upperBound), not \(value)")
    }
}

func parseInterval(_ text: String) throws -> FetchInterval {
    guard let interval = FetchInterval(parsing: text) else {
        throw ValidationError("'\(text)': \(FetchInterval.requirement)")
    }
    return interval
}

/// bgctl's exit statuses, one per cause, so scripts can tell failures apart (README, "bgctl").
enum BGCtlExit {
    /// Anything not below (a run that ended without an answer, an unexpected error).
    static let failure: Int32 = 1
    /// No such app, transfer, task or key (404).
    static let notFound: Int32 = 3
    /// bgd refused by its policy or state: a conflict, a limit, a full disk (409, 429, 503, 507).
    static let refused: Int32 = 4
    /// A transfer ended failed or cancelled, or was paused while `bgctl download` watched it.
    static let transferFailed: Int32 = 5
    /// Usage: bad arguments (argument-parser's own status, sysexits' EX_USAGE).
    static let usage: Int32 = 64
    /// bgd found the request malformed (400, 413, 422), or a file bgctl was given is not what it
    /// should be (EX_DATAERR).
    static let badRequest: Int32 = 65
    /// A file bgctl was given cannot be read: no such file, no permission (EX_NOINPUT).
    static let noInput: Int32 = 66
    /// bgd is not running or its socket cannot be reached (EX_UNAVAILABLE).
    static let unreachable: Int32 = 69
    /// Not allowed: the operator's credential is missing or wrong (401, 403; EX_NOPERM).
    static let permission: Int32 = 77

    static func status(for error: BackgroundError) -> Int32 {
        if error.isDaemonUnreachable || error.isDaemonUnresponsive { return unreachable }
        if error.isSocketNotPermitted { return permission }
        switch error.httpStatus {
        case 404: return notFound
        case 401, 403: return permission
        case 400, 413, 422: return badRequest
        case 409, 429, 503, 507: return refused
        default: return failure
        }
    }
}
