import BackgroundModel
import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// The system wall clock, sleeping on NIO's event-loop timers instead of `Task.sleep`.
///
/// On Linux `Task.sleep` goes through libdispatch (`dispatch_after`), and libdispatch's manager
/// thread, once started, runs its worker-pool monitor: a timer that wakes the process every
/// second for as long as it lives. An event loop's timer is one `timerfd` armed for the deadline.
/// A sleeper still wakes every `maximumNap` to notice a wall clock that was set.
public struct EventLoopClock: WallClock {
    public var maximumNap: Duration
    private let system = SystemClock()

    public init(maximumNap: Duration = .seconds(60)) { self.maximumNap = maximumNap }

    public var now: Date { system.now }
    public var elapsed: Duration { system.elapsed }

    public func sleep(until deadline: Date) async throws {
        while case let remaining = deadline.timeIntervalSince(now), remaining > 0 {
            try await Self.nap(min(.milliseconds(Int64((remaining * 1000).rounded(.up))), maximumNap))
        }
        try Task.checkCancellation()
    }

    /// One timer on an event loop; cancelling the task cancels the timer and throws.
    static func nap(_ duration: Duration) async throws {
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
