@testable import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// bgd learns that an app the user started has exited: from the kernel, on one thread however
/// many apps it watches, and from its clock where the kernel cannot tell.
struct ProcessExitWatchTests {
    /// Starts `sleep 60`, which the test ends itself.
    func sleeper() throws -> Process {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/sleep")
        process.arguments = ["60"]
        try process.run()
        return process
    }

    /// SIGKILL: the test process ignores SIGTERM, and its children inherit that.
    func end(_ process: Process) {
        kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
    }

    /// Threads of this process named `name` (the kernel keeps 15 bytes of a name).
    func threads(named name: String) -> Int {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
        return tasks.filter {
            (try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8))?
                .trimmingCharacters(in: .whitespacesAndNewlines) == name
        }.count
    }

    #if os(Linux)
        @Test func manyProcessesAreWatchedByOneThreadAndEachExitIsNoticed() async throws {
            let processes = try (0..<4).map { _ in try sleeper() }
            let exited = Flags(count: processes.count)
            for (index, process) in processes.enumerated() {
                let pid = process.processIdentifier
                Task {
                    await ProcessExitWatch.exited(
                        pid, startTicks: LaunchedProcess.startTicks(of: pid), clock: ManualClock())
                    exited.set(index)
                }
            }
            #expect(await eventually { PidfdWatcher.shared.watching >= processes.count })
            #expect(await eventually { threads(named: "bgd-exits") == 1 })
            // Each exit reaches its own waiter, and only its own.
            for (index, process) in processes.enumerated().reversed() {
                end(process)
                #expect(await eventually { exited.isSet(index) })
                #expect(exited.setCount == processes.count - index)
            }
        }
    #endif

    #if os(Linux)
        /// A process bgd launched is waited for on the same thread: none of its own while it
        /// lives (a suspended app may live for days), and its status is reaped as before.
        @Test func aLaunchedProcessIsWaitedForWithoutAThreadOfItsOwn() async throws {
            let directory = TemporaryDirectory.make()
            let process = try ProcessLauncher(helper: nil).launch(
                LaunchSpec(
                    command: LaunchCommand(["/bin/sleep", "60"])!, environment: [:], workingDirectory: directory,
                    logFile: directory + "/launch.log"))
            let pid = process.processID
            let status = Mutex<BackgroundDaemon.ExitStatus?>(nil)
            Task {
                let ended = await process.waitForExit()
                status.withLock { $0 = ended }
            }
            #expect(await eventually { threads(named: "bgd-exits") == 1 })
            #expect(threads(named: String("bgd-wait-\(pid)".prefix(15))) == 0)
            kill(pid, SIGKILL)
            #expect(await eventually { status.withLock { $0 } != nil })
            #expect(status.withLock { $0 } == .signalled(SIGKILL))
            #expect(ProcessExitWatch.isGone(pid, startTicks: process.startTicks), "reaped")
        }
    #endif

    @Test func withoutTheKernelsNoticeTheClockLooksUntilTheProcessIsGone() async throws {
        let clock = ManualClock()
        let process = try sleeper()
        let pid = process.processIdentifier
        let exited = Flags(count: 1)
        Task {
            await ProcessExitWatch.exited(
                pid, startTicks: LaunchedProcess.startTicks(of: pid), clock: clock, kernelNotice: false)
            exited.set(0)
        }
        #expect(await eventually { clock.sleeperCount == 1 })
        clock.advance(by: ProcessExitWatch.pollInterval)
        #expect(await eventually { clock.sleeperCount == 1 })
        #expect(!exited.isSet(0))  // alive: still watched
        end(process)
        clock.advance(by: ProcessExitWatch.pollInterval)
        #expect(await eventually { exited.isSet(0) })
    }

    #if os(Linux)
        @Test func aZombieOrAPidReusedByAnotherProcessIsGone() throws {
            let me = getpid()
            #expect(!ProcessExitWatch.isGone(me, startTicks: LaunchedProcess.startTicks(of: me)))
            #expect(ProcessExitWatch.isGone(me, startTicks: (LaunchedProcess.startTicks(of: me) ?? 0) + 1))
            // A process that exited and that its parent has not reaped yet is still in /proc.
            var pid: pid_t = 0
            let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/true"), nil]
            defer { free(argv[0]) }
            try #require(posix_spawn(&pid, "/bin/true", nil, nil, argv, environ) == 0)
            defer {
                var status: Int32 = 0
                waitpid(pid, &status, 0)
            }
            let ticks = LaunchedProcess.startTicks(of: pid)
            var reportedGone = false
            for _ in 0..<200_000 where !reportedGone { reportedGone = ProcessExitWatch.isGone(pid, startTicks: ticks) }
            #expect(reportedGone)
            #expect(FileManager.default.fileExists(atPath: "/proc/\(pid)/stat"))  // a zombie, not gone from /proc
        }
    #endif
}

/// Flags set from other tasks.
final class Flags: Sendable {
    private let flags: Mutex<[Bool]>
    init(count: Int) { flags = Mutex(Array(repeating: false, count: count)) }
    func set(_ index: Int) { flags.withLock { $0[index] = true } }
    func isSet(_ index: Int) -> Bool { flags.withLock { $0[index] } }
    var setCount: Int { flags.withLock { $0.filter { $0 }.count } }
}
