import Foundation

/// A few threads that run blocking work for async callers, oldest job first, and cost nothing
/// while there is none: each waits on a condition variable. What bgd and bgrelay use instead of
/// a libdispatch queue, whose first worker thread starts libdispatch's worker-pool monitor — a
/// 1 s timer that then wakes the process every second for as long as it lives.
///
/// The threads end once the last reference to this object goes and the jobs given before have
/// run: a store's threads go with the store (a test process opens hundreds).
public final class WorkerThreads: Sendable {
    private let jobs = Jobs()

    /// Starts `count` threads named `name` (what `top -H` and /proc show).
    public init(count: Int, name: String) {
        let jobs = self.jobs
        for _ in 0..<count {
            NamedThread.start(name) { jobs.work() }
        }
    }

    deinit { jobs.stop() }

    /// Runs `body` on one of the threads and returns what it returns (or throws what it throws).
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try Task.checkCancellation()
        return try await withCheckedThrowingContinuation { continuation in
            jobs.submit { continuation.resume(with: Result { try body() }) }
        }
    }

    /// The queue the threads share; they hold it, not the `WorkerThreads`, so that its end is seen.
    private final class Jobs: @unchecked Sendable {
        // @unchecked: `pending` and `stopped` are only touched with `condition` locked.
        private let condition = NSCondition()
        private var pending: [@Sendable () -> Void] = []
        private var stopped = false

        func submit(_ job: @escaping @Sendable () -> Void) {
            condition.lock()
            pending.append(job)
            condition.signal()
            condition.unlock()
        }

        func stop() {
            condition.lock()
            stopped = true
            condition.broadcast()
            condition.unlock()
        }

        func work() {
            while true {
                condition.lock()
                while pending.isEmpty && !stopped { condition.wait() }
                guard !pending.isEmpty else {
                    condition.unlock()
                    return
                }
                let job = pending.removeFirst()
                condition.unlock()
                job()
            }
        }
    }
}
