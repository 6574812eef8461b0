import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A child process started with `posix_spawn`, its stdin, stdout and stderr on pipes.
///
/// Not Foundation's `Process`: on Linux its `run()` crashes now and then (an over-read in
/// `findMaximumOpenFromProcSelfFD`, swift-corelibs-foundation#5472, fixed after Swift 6.3.1),
/// and these tests start hundreds of processes.
final class Spawned: @unchecked Sendable {
    // @unchecked: every property is set once in init.
    let processID: pid_t
    /// Write end of the child's stdin (nil: stdin is /dev/null).
    let input: FileHandle?
    let output: FileHandle
    let errors: FileHandle
    /// stderr to the same pipe as stdout.
    let mergedErrors: Bool
    private let reaped = Mutex(false)

    init(
        _ path: String, _ arguments: [String], environment: [String: String]? = nil, stdin: Bool = false,
        mergeErrors: Bool = false
    ) throws {
        // A bgd a test starts, whichever way (directly, under systemd-socket-activate, to see it
        // refuse): what it leaves in its cgroups is removed when the test run ends, since one a
        // test kills cannot remove them itself (`CgroupProbe.removeLeftoversAtExit`).
        if ([path] + arguments).contains(where: { ($0 as NSString).lastPathComponent == "bgd" }),
            let flag = arguments.firstIndex(of: "--state-dir"), flag + 1 < arguments.count
        {
            CgroupProbe.removeLeftoversAtExit(ofStateDirectory: arguments[flag + 1])
        }
        func makePipe() throws -> (read: Int32, write: Int32) {
            var fds: [Int32] = [0, 0]
            guard linuxPipe2(&fds, O_CLOEXEC) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
            return (fds[0], fds[1])
        }
        let inPipe = stdin ? try makePipe() : nil
        let outPipe = try makePipe()
        let errPipe = mergeErrors ? outPipe : try makePipe()
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let inPipe {
            posix_spawn_file_actions_adddup2(&actions, inPipe.read, 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        posix_spawn_file_actions_adddup2(&actions, outPipe.write, 1)
        posix_spawn_file_actions_adddup2(&actions, errPipe.write, 2)
        // Nothing else of the test process leaks into the child (a pipe end held open there
        // would keep another test's read from ending).
        _ = linuxSpawnFileActionsAddClosefrom(&actions, 3)
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        let env = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            argv.forEach { free($0) }
            env.forEach { free($0) }
        }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, path, &actions, nil, argv, env)
        // The child's ends, closed here: the child has its own copies.
        if let inPipe { close(inPipe.read) }
        close(outPipe.write)
        if !mergeErrors { close(errPipe.write) }
        guard status == 0 else {
            if let inPipe { close(inPipe.write) }
            close(outPipe.read)
            if !mergeErrors { close(errPipe.read) }
            throw POSIXError(POSIXErrorCode(rawValue: status) ?? .EIO)
        }
        processID = pid
        input = inPipe.map { FileHandle(fileDescriptor: $0.write, closeOnDealloc: true) }
        output = FileHandle(fileDescriptor: outPipe.read, closeOnDealloc: true)
        errors = mergeErrors ? output : FileHandle(fileDescriptor: errPipe.read, closeOnDealloc: true)
        mergedErrors = mergeErrors
    }

    /// Signals the child, unless it has been waited for (its pid may belong to another by then).
    func signal(_ signal: Int32) {
        reaped.withLock { if !$0 { kill(processID, signal) } }
    }

    /// Waits (on a thread of its own) for the child to exit: its status, or 128 + the signal.
    func waitForExit() async -> Int32 {
        await withCheckedContinuation { continuation in
            let pid = processID
            Thread {
                var status: Int32 = 0
                while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
                self.reaped.withLock { $0 = true }
                let signal = status & 0x7f
                continuation.resume(returning: signal == 0 ? (status >> 8) & 0xff : 128 + signal)
            }.start()
        }
    }
}

// glibc declares these only under _GNU_SOURCE, which Swift's Glibc module does not define; the
// C symbols are there (pipe2 since 2.9, addclosefrom_np since 2.34).
@_silgen_name("pipe2")
private func linuxPipe2(_ fds: UnsafeMutablePointer<Int32>, _ flags: Int32) -> Int32

@_silgen_name("posix_spawn_file_actions_addclosefrom_np")
private func linuxSpawnFileActionsAddClosefrom(
    _ actions: UnsafeMutablePointer<posix_spawn_file_actions_t>, _ from: Int32
) -> Int32
