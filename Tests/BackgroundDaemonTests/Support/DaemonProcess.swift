import BackgroundTesting
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A real bgd, as a child process of the test, on a given state directory and socket.
final class DaemonProcess: @unchecked Sendable {
    // @unchecked: set once in init and only read afterwards.
    private let process: Spawned
    let socketPath: String
    let stateDirectory: String
    /// What bgd wrote on stderr up to "bgd is ready".
    let startupLog: String
    /// Everything bgd writes on stdout and stderr, kept for a failing test to show.
    let output: OutputWatcher

    /// Starts bgd and returns once it says it is ready (it prints "bgd is ready" on stderr).
    /// `launcher` runs it (e.g. `ip netns exec NAME`, for a bgd in a network namespace).
    init(
        stateDirectory: String, socketPath: String, arguments: [String] = [], environment: [String: String] = [:],
        launcher: [String] = []
    ) async throws {
        self.socketPath = socketPath
        self.stateDirectory = stateDirectory
        // Any free port for the push gateway: tests run several daemons at once.
        let command =
            launcher + [try BuiltProducts.path(of: "bgd")]
            + ["--state-dir", stateDirectory, "--socket", socketPath, "--push-port", "0"] + arguments
        process = try Spawned(
            command[0], Array(command.dropFirst()),
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }, mergeErrors: true)
        output = OutputWatcher(process.output)
        guard await output.wait(for: "bgd is ready") else {
            process.signal(SIGKILL)
            throw Failure.didNotStart(stateDirectory + ": " + output.text)
        }
        let text = output.text
        let marker = text.range(of: "bgd is ready")!
        startupLog = String(text[..<(text[marker.upperBound...].firstIndex(of: "\n") ?? text.endIndex)])
    }

    enum Failure: Error { case didNotStart(String) }

    /// A test that fails or times out must not leave a bgd behind (a no-op once it has exited).
    /// What a killed one left in its cgroups stays until the test run ends (tests look at it, and
    /// the next bgd on the directory reclaims it); then `CgroupProbe` removes it.
    deinit {
        process.signal(SIGKILL)
    }

    var processID: Int32 { process.processID }

    func signal(_ signal: Int32) { process.signal(signal) }

    /// Waits for bgd to exit and returns its status (the signal's number if a signal ended it).
    func waitForExit() async -> Int32 {
        let status = await process.waitForExit()
        return status > 128 ? status - 128 : status
    }

    /// Reads the pipe until a line contains `marker` (true) or it closes (false), then keeps
    /// draining it on the same thread so bgd never blocks on a full pipe.
    static func readUntil(_ marker: String, from handle: FileHandle) async -> String? {
        await withCheckedContinuation { continuation in
            Thread {
                var seen = ""
                var resumed = false
                while true {
                    let data = handle.availableData
                    if data.isEmpty { break }
                    if !resumed {
                        seen += String(decoding: data, as: UTF8.self)
                        if let range = seen.range(of: marker) {
                            resumed = true
                            let through = seen[..<range.upperBound]
                            let lineEnd = seen[range.upperBound...].firstIndex(of: "\n") ?? seen.endIndex
                            continuation.resume(returning: String(through) + String(seen[range.upperBound..<lineEnd]))
                        }
                    }
                }
                if !resumed { continuation.resume(returning: nil) }
            }.start()
        }
    }
}

/// Waits until a process that is not our child has exited (pidfd: an event, not a poll loop).
func waitUntilGone(_ pid: Int32, timeoutMilliseconds: Int32 = 10_000) -> Bool {
    let descriptor = pidfdOpen(pid, 0)
    guard descriptor >= 0 else { return errno == ESRCH }
    defer { close(descriptor) }
    var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
    return poll(&poller, 1, timeoutMilliseconds) == 1
}

// glibc 2.36 has the wrapper; Swift cannot call the variadic syscall(2).
@_silgen_name("pidfd_open")
private func pidfdOpen(_ pid: Int32, _ flags: UInt32) -> Int32
