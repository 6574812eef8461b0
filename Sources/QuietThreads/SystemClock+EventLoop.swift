import BackgroundModel
import Foundation
import NIOCore
import NIOPosix
import Synchronization

extension SystemClock {
    /// The system wall clock, napping on NIO's event-loop timers instead of `Task.sleep`.
    ///
    /// On Linux `Task.sleep` goes through libdispatch (`dispatch_after`), and libdispatch's
    /// manager thread, once started, runs its worker-pool monitor: a timer that wakes the process
    /// every second for as long as it lives. An event loop's timer is one `timerfd` armed for the
    /// deadline. NIO's timers run on CLOCK_MONOTONIC, which stops during suspend: after a resume
    /// a sleeper is up to `maximumNap` late.
    public static func onEventLoops(maximumNap: Duration = .seconds(60)) -> SystemClock {
        SystemClock(maximumNap: maximumNap, nap: napOnEventLoop)
    }

    /// One timer on an event loop; cancelling the task cancels the timer and throws.
    @Sendable public static func napOnEventLoop(_ duration: Duration) async throws {
        let loop = MultiThreadedEventLoopGroup.singleton.any()
        let timer = Mutex<Scheduled<Void>?>(nil)
        let (seconds, attoseconds) = duration.components
        let nanoseconds = seconds * 1_000_000_000 + attoseconds / 1_000_000_000
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let scheduled = loop.scheduleTask(in: .nanoseconds(nanoseconds)) { continuation.resume() }
                // The only failure is a cancelled timer: the task was cancelled.
                scheduled.futureResult.whenFailure { _ in continuation.resume(throwing: CancellationError()) }
                timer.withLock { $0 = scheduled }
                if Task.isCancelled { scheduled.cancel() }
            }
        } onCancel: {
            timer.withLock { $0?.cancel() }
        }
        try Task.checkCancellation()
    }
}
