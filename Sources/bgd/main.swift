import Foundation
import NIOCore
import NIOPosix

// Idle is free (issue 17): every task runs on NIO's event loops, and no libdispatch worker
// thread ever starts — the first would start libdispatch's worker-pool monitor, a timer that
// wakes the process every second. So, before any async code: signals go to a sigwait thread,
// and NIO takes over the global executor. `BGD_DISPATCH=1` keeps Swift's default executor
// (libdispatch), to compare or to rule the executor out when something looks wrong.
let quietExecutor = ProcessInfo.processInfo.environment["BGD_DISPATCH"] != "1"
if quietExecutor {
    SignalWaiter.shared.start([SIGTERM, SIGINT])
    _ = NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
}

/// The main thread waits here while the command runs as a task on the loops.
final class Completion: @unchecked Sendable {
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

let completion = Completion()
Task.detached {
    await BGD.main()
    completion.finish()
}
completion.wait()
