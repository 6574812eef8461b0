import Foundation

/// A few threads that run blocking work for async callers, oldest job first, and cost nothing
/// while there is none: each waits on a condition variable. What bgd and bgrelay use instead of
/// a libdispatch queue, whose first worker thread starts libdispatch's worker-pool monitor — a
/// 1 s timer that then wakes the process every second for as long as it lives.
public final class WorkerThreads: @unchecked Sendable {
    // @unchecked: `jobs` is only touched with `condition` locked.
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []

    /// Starts `count` threads named `name` (what `top -H` and /proc show).
    public init(count: Int, name: String) {
        for _ in 0..<count {
            NamedThread.start(name) { [unowned self] in self.work() }
        }
    }

    /// Runs `body` on one of the threads and returns what it returns (or throws what it throws).
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try Task.checkCancellation()
        return try await withCheckedThrowingContinuation { continuation in
            submit { continuation.resume(with: Result { try body() }) }
        }
    }

    private func submit(_ job: @escaping @Sendable () -> Void) {
        condition.lock()
        jobs.append(job)
        condition.signal()
        condition.unlock()
    }

    private func work() {
        while true {
            condition.lock()
            while jobs.isEmpty { condition.wait() }
            let job = jobs.removeFirst()
            condition.unlock()
            job()
        }
    }
}
