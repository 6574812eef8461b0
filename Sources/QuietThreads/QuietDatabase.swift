import Foundation
import GRDB

/// A GRDB database used through its synchronous API on `WorkerThreads`, with async methods that
/// look like GRDB's own to their callers.
///
/// GRDB's async API runs each access on a `DispatchQueue` executor, and on Linux the first
/// libdispatch worker thread starts the worker-pool monitor, which wakes the process every
/// second from then on (an idle bgd paid 60 wakeups a minute for it; so did an idle bgrelay
/// once it had stored anything).
public struct QuietDatabase: Sendable {
    public let database: any DatabaseWriter
    private let threads: WorkerThreads

    public init(_ database: any DatabaseWriter, threads: WorkerThreads) {
        self.database = database
        self.threads = threads
    }

    public func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let database = self.database
        return try await threads.run { try database.read(body) }
    }

    public func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let database = self.database
        return try await threads.run { try database.write(body) }
    }

    public func writeWithoutTransaction<T: Sendable>(
        _ body: @escaping @Sendable (Database) throws -> T
    ) async throws -> T {
        let database = self.database
        return try await threads.run { try database.writeWithoutTransaction(body) }
    }
}
