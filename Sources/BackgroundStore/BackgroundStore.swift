import BackgroundModel
import Foundation
import GRDB
import QuietThreads

/// bgd's durable state: one SQLite file in WAL mode, every method one transaction.
///
/// The store is the truth: a state change and the event it produces commit together, and the
/// daemon recomputes everything else (plans, who is running) from here after a crash.
public struct BackgroundStore: Sendable {
    let writer: QuietDatabase
    /// Advances whenever a device token or provider key is added, revoked or removed.
    public let pushCredentials = Generation()
    /// Advances with every commit of the writer (a file store's): whatever was read before may
    /// have changed. The app listing is kept encoded until it moves.
    public let commits: Generation

    /// Wraps an open database and brings its schema up to date.
    public init(_ writer: any DatabaseWriter) throws {
        try self.init(writer, commits: Generation())
    }

    init(_ writer: any DatabaseWriter, commits: Generation) throws {
        // Threads of its own, each entering GRDB's queues alone (`QuietDatabase`); they end with it.
        self.writer = QuietDatabase(
            writer, readers: WorkerThreads(count: 1, name: "bgd-store-read"),
            writers: WorkerThreads(count: 1, name: "bgd-store"))
        self.commits = commits
        // A file a newer bgd has written (an upgrade rolled back): refused, not written by rules
        // older than its own. GRDB's migrator passes over migrations it does not know, and the
        // newer bgd, run again later, would take its one-time mends for done.
        let unknown = try writer.read { db -> Set<String> in
            guard try db.tableExists("grdb_migrations") else { return [] }  // a new file
            return try Set(String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations"))
                .subtracting(Self.migrator.migrations)
        }
        guard unknown.isEmpty else { throw MadeByANewerBgd(migrations: unknown.sorted()) }
        try Self.migrator.migrate(writer)
    }

    /// The store was written by a newer bgd than this one.
    public struct MadeByANewerBgd: Error, CustomStringConvertible {
        public var migrations: [String]
        public var description: String {
            "the state database was written by a newer bgd (its schema has steps this bgd does not know: \(migrations.joined(separator: ", "))): run that bgd again, or move the state directory aside to start this one afresh (apps must then be registered again)"
        }
    }

    /// How hard a commit tries to reach the disk. `full` survives power loss (an fsync per
    /// commit); `normal` survives a crash of bgd (`kill -9`) but may lose the last commits
    /// when the machine loses power (SQLite's WAL + synchronous=NORMAL guarantee).
    public enum Durability: String, Sendable, CaseIterable {
        case full
        case normal
    }

    /// Opens (creating if needed) the database file at `path` in WAL mode.
    /// `onCommit` hears how long each commit took (for the metrics).
    public static func open(
        atPath path: String, durability: Durability = .full, onCommit: (@Sendable (Duration) -> Void)? = nil
    ) throws -> BackgroundStore {
        do {
            return try openDatabase(atPath: path, durability: durability, onCommit: onCommit)
        } catch let error as DatabaseError where [.SQLITE_NOTADB, .SQLITE_CORRUPT].contains(error.resultCode) {
            throw Damaged(path: path, reason: error.message ?? "\(error.resultCode)")
        }
    }

    /// The state file is there and is not a database SQLite can read (overwritten, truncated by
    /// hand, not bgd's): said with the file and what to do, not as SQLite's error number.
    public struct Damaged: Error, CustomStringConvertible {
        public var path: String
        public var reason: String
        public var description: String {
            "\(path) is not a database SQLite can read (\(reason)): move it (and any -wal and -shm beside it) aside to keep it, and bgd starts with an empty store — apps must then be registered again"
        }
    }

    /// The most the write-ahead log keeps on disk once a checkpoint has emptied it.
    public static let walSizeLimit = 4 << 20

    private static func openDatabase(
        atPath path: String, durability: Durability, onCommit: (@Sendable (Duration) -> Void)?
    ) throws -> BackgroundStore {
        var configuration = Configuration()
        configuration.foreignKeysEnabled = true
        configuration.busyMode = .timeout(5)
        // A resident daemon's memory (issue 17): SQLite's default page cache is 2 MB a
        // connection and GRDB's pool opens up to five readers beside the writer — 12 MB once
        // warm, for a file that pruning keeps at a few MB. The store reads on one thread and writes
        // on another (`QuietDatabase`), so one reader and the writer are all it uses; 1 MB each
        // holds the hot tables.
        configuration.maximumReaderCount = 1
        let commits = Generation()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA cache_size = -1024")
            // The -wal file stays at its largest until the last connection closes — for a daemon,
            // months — unless a limit has it cut back whenever a checkpoint empties it.
            try db.execute(sql: "PRAGMA journal_size_limit = \(walSizeLimit)")
            try db.execute(sql: "PRAGMA synchronous = \(durability == .full ? "FULL" : "NORMAL")")
            if !db.configuration.readonly {
                db.add(transactionObserver: CommitTimer(report: onCommit, commits: commits), extent: .databaseLifetime)
            }
        }
        let pool = try DatabasePool(path: path, configuration: configuration)
        // Once more on the writer, now: the pool sets `synchronous = NORMAL` on it after
        // `prepareDatabase` has run (WAL's usual choice), which silently made `full` mean
        // normal — no fsync at commit, so a power loss could take acknowledged work. The chaos
        // campaign's fsync-failure fault found it: failing fsyncs changed nothing.
        try pool.writeWithoutTransaction { db in
            try db.execute(sql: "PRAGMA synchronous = \(durability == .full ? "FULL" : "NORMAL")")
            // Pages freed by pruning go back to the file system (`prune`'s incremental_vacuum).
            // A file made before this setting takes it only through one VACUUM, done once here.
            if try Int.fetchOne(db, sql: "PRAGMA auto_vacuum") != 2 {
                try db.execute(sql: "PRAGMA auto_vacuum = INCREMENTAL")
                try db.execute(sql: "VACUUM")
                try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)")  // the whole file went through the log
            }
        }
        return try BackgroundStore(pool, commits: commits)
    }

    /// The writer's `PRAGMA synchronous`: 2 (FULL, an fsync at every commit) or 1 (NORMAL).
    public func writerSynchronous() async throws -> Int {
        try await writer.writeWithoutTransaction { db in try Int.fetchOne(db, sql: "PRAGMA synchronous") ?? -1 }
    }

    /// An in-memory store, for tests of the store itself.
    public static func inMemory() throws -> BackgroundStore {
        var configuration = Configuration()
        configuration.foreignKeysEnabled = true
        let commits = Generation()
        configuration.prepareDatabase { db in
            db.add(transactionObserver: CommitTimer(report: nil, commits: commits), extent: .databaseLifetime)
        }
        return try BackgroundStore(DatabaseQueue(configuration: configuration), commits: commits)
    }

    /// The journal mode in force (`wal` for files opened with `open(atPath:)`).
    public func journalMode() async throws -> String {
        try await writer.read { db in try String.fetchOne(db, sql: "PRAGMA journal_mode") ?? "" }
    }

    /// Runs SQLite's own consistency check; "ok" when the file is sound.
    public func integrityCheck() async throws -> String {
        try await writer.read { db in try String.fetchOne(db, sql: "PRAGMA integrity_check") ?? "" }
    }
}

/// Errors the caller acts on; anything else is a `DatabaseError` and propagates.
public enum StoreError: Error, Equatable, Sendable {
    case appAlreadyRegistered(AppID)
    case appNotFound(AppID)
    case runNotFound(RunID)
    case runAlreadyInFlight(AppID)
    case taskRequestNotFound(AppID, String)
}

/// A write the disk could not take, told apart from a bug: the caller refuses new work with a
/// reason and keeps serving what it has (reliability-matrix D12).
public enum StorageTrouble: Sendable, Equatable {
    /// `SQLITE_FULL`: the volume holding the state directory is full.
    case full
    /// An I/O error or a lock held too long: the store cannot write now.
    case unavailable

    /// What `error` means for the caller, if it is the storage's trouble at all.
    public init?(_ error: any Error) {
        guard let error = error as? DatabaseError else { return nil }
        switch error.resultCode {
        case .SQLITE_FULL: self = .full
        case .SQLITE_IOERR, .SQLITE_BUSY, .SQLITE_LOCKED, .SQLITE_CANTOPEN, .SQLITE_READONLY: self = .unavailable
        default: return nil
        }
    }
}
