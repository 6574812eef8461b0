import Foundation

/// Runs a program to completion and collects its output (for driving bgctl and bgd in tests).
enum Command {
    struct Output: Sendable {
        var status: Int32
        var standardOutput: String
        var standardError: String
    }

    static func run(_ path: String, _ arguments: [String], environment: [String: String]? = nil) async throws -> Output {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = arguments
        if let environment { process.environment = environment }
        let out = Pipe()
        let err = Pipe()
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        async let standardOutput = readAll(out.fileHandleForReading)
        async let standardError = readAll(err.fileHandleForReading)
        let (stdout, stderr) = await (standardOutput, standardError)
        process.waitUntilExit()
        return Output(status: process.terminationStatus, standardOutput: stdout, standardError: stderr)
    }

    /// Reads to end of file on a thread of its own (the read blocks).
    static func readAll(_ handle: FileHandle) async -> String {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)) }.start()
        }
    }
}
