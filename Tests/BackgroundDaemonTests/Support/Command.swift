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

    /// Reads to end of file on a thread of its own (the read blocks).
    static func readAll(_ handle: FileHandle) async -> String {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)) }
                .start()
        }
    }
}
