import Foundation
import GRDB

/// The store's database, used through GRDB's synchronous API on threads of the store's own.
///
/// GRDB's async API runs each access on a `DispatchQueue` executor. On Linux the first
/// libdispatch worker thread starts libdispatch's worker-pool monitor, a 1 s timer on its
/// manager thread that then wakes the process every second for as long as it lives (an idle bgd
/// paid 60 wakeups a minute for it). Plain threads waiting on a condition variable cost nothing
/// while idle; the store's async methods look the same to their callers.
struct StoreWriter: Sendable {
    let database: any DatabaseWriter
    private let threads: DatabaseThreads

    init(_ database: any DatabaseWriter, threads: DatabaseThreads = .shared) {
        self.database = database
        self.threads = threads
    }

    func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let database = self.database
        return try await threads.run { try database.read(body) }
    }

    func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let database = self.database
        return try await threads.run { try database.write(body) }
    }

    func writeWithoutTransaction<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let database = self.database
        return try await threads.run { try database.writeWithoutTransaction(body) }
    }
}

/// A few threads that run blocking database work for async callers, oldest job first.
final class DatabaseThreads: @unchecked Sendable {
    /// Writes are serialised by SQLite and GRDB anyway; the others let reads go on beside one.
    static let shared = DatabaseThreads(count: 4)

    // @unchecked: `jobs` is only touched with `condition` locked.
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []

    init(count: Int) {
        for _ in 0..<count {
            let thread = Thread { [unowned self] in self.work() }
            thread.name = "bgd-store"
            thread.start()
        }
    }

    func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
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
