import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Runs a helper program to its end and gives back its exit status and what it printed — bgd's
/// `nmcli`, bgctl's `bgd --check` and `systemctl`. posix_spawn, not Foundation's `Process`: its
/// SIGCHLD source would start libdispatch's once-a-second monitor in bgd (which is why it lives
/// here, with the rest of what keeps bgd off libdispatch), and its `run()` can crash on Linux
/// (swift-corelibs-foundation#5472).
public enum ChildProcess {
    public struct Ended: Sendable {
        /// The exit status, or 128 + the signal that ended it.
        public var status: Int32
        /// What it printed (standard error too if asked), up to the limit.
        public var output: String

        /// The first line of the output, trimmed.
        public var firstLine: String {
            output.split(separator: "\n").first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
        }
    }

    /// `program` with `arguments`, standard input from /dev/null; its standard error is read
    /// with its output when `withErrors`, else thrown away. Nil when it could not be started or
    /// had not ended within `timeout` (it is killed then). The first `limit` bytes are kept.
    public static func run(
        _ program: String, _ arguments: [String], timeout: Duration, withErrors: Bool = true, limit: Int = 64 << 10
    ) -> Ended? {
        #if os(Linux)
            var pipeEnds: [Int32] = [0, 0]
            // Close-on-exec from the start: a child another thread spawns meanwhile must not hold
            // this pipe's write end open (this one's read would wait for it). dup2 into the
            // child's stdout clears the flag there.
            guard closeOnExecPipe(&pipeEnds) == 0 else { return nil }
            defer { close(pipeEnds[0]) }
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
            posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 1)
            if withErrors {
                posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 2)
            } else {
                posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
            }
            posix_spawn_file_actions_addclose(&actions, pipeEnds[0])
            let argv = ([program] + arguments).map { strdup($0) } + [nil]
            defer { for pointer in argv { free(pointer) } }
            var pid: pid_t = 0
            let spawned = posix_spawn(&pid, program, &actions, nil, argv, environ) == 0
            close(pipeEnds[1])
            guard spawned else { return nil }
            var output = [UInt8]()
            var buffer = [UInt8](repeating: 0, count: 4096)
            var entry = pollfd(fd: pipeEnds[0], events: Int16(POLLIN), revents: 0)
            // Real time, monotonic: how long a helper may take is no policy's `now`.
            let clock = ContinuousClock()
            let deadline = clock.now.advanced(by: timeout)
            var timedOut = false
            while true {
                let left = clock.now.duration(to: deadline).seconds
                guard left > 0 else {
                    timedOut = true
                    break
                }
                let ready = poll(&entry, 1, Int32(min(left * 1000, 60_000).rounded(.up)))
                if ready < 0 && errno == EINTR { continue }
                guard ready > 0 else { continue }
                let count = read(pipeEnds[0], &buffer, buffer.count)
                if count < 0 && errno == EINTR { continue }
                if count <= 0 { break }
                if output.count < limit { output += buffer[0..<min(count, limit - output.count)] }
            }
            if timedOut { kill(pid, SIGKILL) }
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            guard !timedOut else { return nil }
            let signal = status & 0x7f
            return Ended(
                status: signal == 0 ? (status >> 8) & 0xff : 128 + signal, output: String(decoding: output, as: UTF8.self))
        #else
            return nil
        #endif
    }
}

#if os(Linux)
    // glibc declares pipe2 only under _GNU_SOURCE, which Swift's Glibc module does not define;
    // the C symbol is there.
    @_silgen_name("pipe2")
    private func pipe2(_ ends: UnsafeMutablePointer<Int32>, _ flags: Int32) -> Int32

    private func closeOnExecPipe(_ ends: inout [Int32]) -> Int32 { pipe2(&ends, O_CLOEXEC) }
#else
    private func closeOnExecPipe(_ ends: inout [Int32]) -> Int32 {
        guard pipe(&ends) == 0 else { return -1 }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        return 0
    }
#endif
