import BackgroundModel
import Foundation
import QuietThreads
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Waits until a process exits: an app the user started, which reported its pid, or one bgd
/// launched (`exitedChild`; its caller then reaps it). On Linux the kernel tells: the process's
/// pidfd becomes readable, and one thread (`PidfdWatcher`) sleeps in poll(2) over every watched
/// pidfd at once, ending when none is left. Where a pidfd cannot be had (macOS, a kernel before
/// 5.3, a seccomp filter, out of descriptors), a user's process is looked at every
/// `pollInterval` on bgd's clock instead — slower, never forever — and a child is waited for
/// by a thread of its own.
enum ProcessExitWatch {
    /// How often a process is looked at where the kernel cannot tell.
    static let pollInterval: Duration = .seconds(2)

    /// Returns once `pid` has exited (or the pid names another process than the one that
    /// started at `startTicks`). `kernelNotice: false` skips the pidfd, as where it is missing.
    static func exited(_ pid: Int32, startTicks: Int64?, clock: any WallClock, kernelNotice: Bool = true) async {
        if kernelNotice, await kernelSaysExited(pid) { return }
        while !isGone(pid, startTicks: startTicks) {
            // Cancelled: bgd is stopping, and nobody waits for the answer.
            guard (try? await clock.sleep(for: pollInterval)) != nil else { return }
        }
    }

    /// Waits for bgd's own child `pid` to exit (a zombie now, for the caller to reap without
    /// blocking), on the kernel's word; false at once where the kernel cannot tell. A child's
    /// pid cannot be reused before it is reaped, so the pidfd names this very process.
    static func exitedChild(_ pid: Int32) async -> Bool { await kernelSaysExited(pid) }

    /// True once the kernel said `pid` exited (its pidfd became readable, or it was gone
    /// already); false at once where it cannot say — no pidfd, or no watcher thread.
    private static func kernelSaysExited(_ pid: Int32) async -> Bool {
        #if os(Linux)
            let descriptor = pidfdOpen(pid, 0)
            guard descriptor >= 0 else { return errno == ESRCH }
            guard PidfdWatcher.shared.isUsable else {
                close(descriptor)
                return false
            }
            await PidfdWatcher.shared.wait(for: descriptor)
            return true
        #else
            return false
        #endif
    }

    /// Whether `pid` no longer names the process that started at `startTicks`: gone, a zombie
    /// (exited, its parent has not reaped it yet), or a new process that reuses the pid.
    static func isGone(_ pid: Int32, startTicks: Int64?) -> Bool {
        if let fields = ProcStat.fields(of: pid), fields.count > 19 {
            if fields[0] == "Z" || fields[0] == "X" { return true }
            if let startTicks, Int64(fields[19]) != startTicks { return true }
            return false
        }
        // No /proc (or the process is gone from it): the kernel's own answer. EPERM is a live
        // process of another user's.
        return kill(pid, 0) != 0 && errno == ESRCH
    }
}

#if os(Linux)
    /// One thread for every pidfd bgd watches: it polls them all and a pipe that says the set
    /// changed, resumes each waiter whose process exited, and ends when nobody waits — an idle
    /// bgd has no such thread, and a hundred suspended apps have one, not a hundred.
    final class PidfdWatcher: Sendable {
        static let shared = PidfdWatcher()

        private struct State {
            var waiters: [Int32: CheckedContinuation<Void, Never>] = [:]
            var threadRuns = false
        }

        private let state = Mutex(State())
        /// Written to when a pidfd is added, so a poll in progress looks at the new set.
        private let changed: (read: Int32, write: Int32)

        private init() {
            var ends: [Int32] = [-1, -1]
            if pipe2(&ends, O_CLOEXEC | O_NONBLOCK) != 0 { ends = [-1, -1] }
            changed = (ends[0], ends[1])
        }

        /// Whether it has its pipe (out of descriptors when first asked, it has not).
        var isUsable: Bool { changed.read >= 0 }

        /// The number of pidfds watched now.
        var watching: Int { state.withLock { $0.waiters.count } }

        /// Returns when `descriptor` (a pidfd, closed here) becomes readable: its process exited.
        func wait(for descriptor: Int32) async {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let startsThread = state.withLock { state in
                    state.waiters[descriptor] = continuation
                    defer { state.threadRuns = true }
                    return !state.threadRuns
                }
                if startsThread {
                    NamedThread.start("bgd-exits") { self.serve() }
                } else {
                    var byte: UInt8 = 1
                    _ = write(changed.write, &byte, 1)
                }
            }
        }

        private func serve() {
            while true {
                let descriptors: [Int32]? = state.withLock { state in
                    guard !state.waiters.isEmpty else {
                        state.threadRuns = false
                        return nil
                    }
                    return Array(state.waiters.keys)
                }
                guard let descriptors else { return }
                var polled = [pollfd(fd: changed.read, events: Int16(POLLIN), revents: 0)]
                polled += descriptors.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
                while poll(&polled, nfds_t(polled.count), -1) == -1 && errno == EINTR {}
                var drain = [UInt8](repeating: 0, count: 64)
                while read(changed.read, &drain, drain.count) > 0 {}
                for entry in polled.dropFirst() where entry.revents != 0 {
                    // The waiter out first, then the descriptor closed: closed first, its number
                    // could be a new pidfd of another launch by the time the waiter was looked up,
                    // and that launch's waiter would be resumed (and this one never).
                    let waiter = state.withLock { $0.waiters.removeValue(forKey: entry.fd) }
                    close(entry.fd)
                    waiter?.resume()
                }
            }
        }
    }

    // glibc 2.36 has the wrapper; Swift cannot call the variadic syscall(2).
    @_silgen_name("pidfd_open")
    private func pidfdOpen(_ pid: Int32, _ flags: UInt32) -> Int32

    // Declared only under _GNU_SOURCE, which Swift's Glibc module does not define.
    @_silgen_name("pipe2")
    private func pipe2(_ ends: UnsafeMutablePointer<Int32>, _ flags: Int32) -> Int32
#endif
