import BackgroundTesting
import Foundation

/// Runs a program to completion and collects its output (for driving bgctl and bgd in tests).
enum Command {
    struct Output: Sendable {
        var status: Int32
        var standardOutput: String
        var standardError: String
    }

    static func run(_ path: String, _ arguments: [String], environment: [String: String]? = nil) async throws -> Output
    {
        let process = try Spawned(path, arguments, environment: environment)
        async let standardOutput = readAll(process.output)
        async let standardError = readAll(process.errors)
        let (stdout, stderr) = await (standardOutput, standardError)
        let status = await process.waitForExit()
        return Output(status: status, standardOutput: stdout, standardError: stderr)
    }

    /// bgd started on `directory`/state (its socket beside it, the gateway on any port), run to
    /// its exit: what a person sees when something there keeps it from starting.
    static func bgd(onStateIn directory: String) async throws -> Output {
        try await run(
            try BuiltProducts.path(of: "bgd"),
            ["--state-dir", directory + "/state", "--socket", directory + "/bgd.sock", "--push-port", "0"])
    }

    /// Reads to end of file on a thread of its own (the read blocks).
    static func readAll(_ handle: FileHandle) async -> String {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)) }
                .start()
        }
    }
}
