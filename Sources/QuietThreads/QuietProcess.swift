import Foundation
import NIOCore
import NIOPosix

/// How bgd and bgrelay run their command so that an idle process sleeps: every task on NIO's
/// event loops, so no libdispatch worker thread ever starts (the first would start libdispatch's
/// worker-pool monitor, a timer that wakes the process every second), and SIGTERM and SIGINT on
/// a `sigwait` thread (`SignalWaiter`) instead of a libdispatch signal source.
public enum QuietProcess {
    /// Runs `command` as a task and returns when it ends; the main thread waits meanwhile.
    /// With `quietly` false, Swift's default executor (libdispatch) runs it and signals are left
    /// to the command — to compare, or to rule the executor out when something looks wrong.
    /// Call it first thing in main: the signal mask is inherited by threads started after.
    public static func run(
        quietly: Bool, signalThread: String, _ command: @escaping @Sendable () async -> Void
    ) {
        if quietly {
            SignalWaiter.shared.start([SIGTERM, SIGINT], threadName: signalThread)
            _ = NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        }
        let completion = Completion()
        Task.detached {
            await command()
            completion.finish()
        }
        completion.wait()
    }
}

/// The main thread waits here while the command runs as a task.
private final class Completion: @unchecked Sendable {
    // @unchecked: `done` is only touched with `condition` locked.
    private let condition = NSCondition()
    private var done = false

    func finish() {
        condition.lock()
        done = true
        condition.signal()
        condition.unlock()
    }

    func wait() {
        condition.lock()
        while !done { condition.wait() }
        condition.unlock()
    }
}
