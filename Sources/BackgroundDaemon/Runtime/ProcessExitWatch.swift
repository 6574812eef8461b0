import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Waits until a process that is not bgd's child exits — an app the user started, which reported
/// its pid — with the kernel telling (a pidfd becomes readable), not a timer: a thread of its own
/// sleeps in poll(2) until then. Where pidfds are missing (macOS, old kernels) it returns at once
/// only for a process already gone, and otherwise waits for nothing (the app's stream closing
/// still ends its state).
enum ProcessExitWatch {
    static func exited(_ pid: Int32) async {
        #if os(Linux)
            let descriptor = pidfdOpen(pid, 0)
            guard descriptor >= 0 else {
                if errno == ESRCH { return }  // already gone
                await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }  // cannot watch: never
                return
            }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let thread = Thread {
                    var poller = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                    while poll(&poller, 1, -1) == -1 && errno == EINTR {}
                    close(descriptor)
                    continuation.resume()
                }
                thread.name = "bgd-watch-\(pid)"
                thread.start()
            }
        #else
            await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
        #endif
    }
}

#if os(Linux)
    // glibc 2.36 has the wrapper; Swift cannot call the variadic syscall(2).
    @_silgen_name("pidfd_open")
    private func pidfdOpen(_ pid: Int32, _ flags: UInt32) -> Int32
#endif
