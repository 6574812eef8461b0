import Foundation
import GRDB

/// A GRDB database used through its synchronous API on threads of its own, with async methods
/// that look like GRDB's own to their callers.
///
/// On Linux the first libdispatch worker thread starts the worker-pool monitor, which wakes the
/// process every second from then on (an idle bgd paid 60 wakeups a minute for it; so did an
/// idle bgrelay once it had stored anything). Two ways into it are kept shut:
/// - GRDB's async API runs each access on a `DispatchQueue` executor: the sync API is used,
///   on `WorkerThreads`;
/// - GRDB guards its connections with dispatch queues (a pool's concurrent queue and barriers,
///   a writer's serial queue), and two threads meeting there hand the rest to a dispatch worker
///   (one start of bgd in eight, caught in gdb at `Pool.get`). So reads run on one thread and
///   writes on another, each queue only ever entered by its one thread: reads still go on
///   beside a write (WAL), one at a time.
public struct QuietDatabase: Sendable {
    public let database: any DatabaseWriter
    private let readers: WorkerThreads
    private let writers: WorkerThreads

    /// `readers` and `writers` are one thread each (more would meet at GRDB's queues), the
    /// database's alone. A database of one connection (`DatabaseQueue`) reads on the writers'
    /// thread too.
    public init(_ database: any DatabaseWriter, readers: WorkerThreads, writers: WorkerThreads) {
        self.database = database
        self.readers = database is DatabasePool ? readers : writers
        self.writers = writers
    }

    public func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let database = self.database
        return try await readers.run { try database.read(body) }
    }

    public func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let database = self.database
        return try await writers.run { try database.write(body) }
    }

    public func writeWithoutTransaction<T: Sendable>(
        _ body: @escaping @Sendable (Database) throws -> T
    ) async throws -> T {
        let database = self.database
        return try await writers.run { try database.writeWithoutTransaction(body) }
    }
}
