import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import GRDB
import Synchronization
import Testing

/// The event table holds every app's events for `--keep-history` (30 days: some 150,000 rows
/// for 100 apps), and most of them are closed. What bgd asks of it at every acknowledgement,
/// run end and pruner pass reads the open few through an index, never the whole table.
struct EventIndexTests {
    let t0 = Date(timeIntervalSince1970: 1_767_603_600)
    let app = AppID(rawValue: "com.example.a")!

    @Test func everyQueryOfTheEventTableUsesAnIndex() async throws {
        let statements = Mutex<[String]>([])
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            db.trace(options: .statement) { event in
                if case .statement(let statement) = event { statements.withLock { $0.append(statement.sql) } }
            }
        }
        let database = try DatabaseQueue(path: TemporaryDirectory.make() + "/bgd.sqlite", configuration: configuration)
        let store = try BackgroundStore(database)
        _ = try await store.register(
            RegisterAppRequest(id: app, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum),
            tokenHash: "hash", now: t0)
        statements.withLock { $0.removeAll() }  // the migrations' own statements are not queries

        // What bgd does with events: a run's event, read, counted, acknowledged, its run ended;
        // the pruner's pass.
        let run = try await store.startRun(
            .fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30), now: t0)
        let open = try await store.openEvents(for: app, after: nil, limit: 64)
        #expect(try await store.openEventCount(for: app) == open.count)
        for seq in open.map(\.seq) {
            try await store.acknowledge(upTo: seq, only: true, for: app, now: t0)
            try await store.acknowledge(upTo: seq, for: app, now: t0)
        }
        _ = try await store.finishRun(run.id, outcome: .newData, now: t0.addingTimeInterval(5))
        _ = try await store.appsWithWaitingSessionEvents()
        let ages = StampAges(now: t0.addingTimeInterval(40 * 86400))
        _ = try await store.expireSessionEvents(olderThan: .seconds(30 * 86400), ages: ages)
        _ = try await store.carryForwardSessionEvents(createdBy: t0, by: 60)
        _ = try await store.expiredDownloads()
        _ = try await store.prune(BackgroundStore.Retention(), ages: ages)

        let ofEvents = statements.withLock { $0 }.filter {
            $0.range(of: #"(FROM|UPDATE|INTO)\s+"?event"?\b"#, options: .regularExpression) != nil
                && !$0.hasPrefix("INSERT")
        }
        #expect(ofEvents.count >= 10, "\(ofEvents)")
        var scans: [String] = []
        var plans: [String] = []
        for sql in Set(ofEvents) {
            let plan = try await database.read { db in
                let statement = try db.makeStatement(sql: "EXPLAIN QUERY PLAN " + sql)
                statement.setUncheckedArguments([])  // parameters unbound: planned as bgd prepares it
                return try Row.fetchAll(statement).map { $0["detail"] as String }
            }
            // A whole-table read (no index), or one through the primary key other than for one
            // event: every app's every event, or one app's whole history.
            let whole = plan.filter {
                $0.range(
                    of: #"^SCAN event$|sqlite_autoindex_event_1(?! \(appId=\? AND seq=\?\))"#,
                    options: .regularExpression)
                    != nil
            }
            plans.append("\(sql)\n  → \(plan.joined(separator: "; "))")
            if !whole.isEmpty { scans.append("\(sql)\n  → \(plan.joined(separator: "; "))") }
        }
        #expect(scans.isEmpty, "\(scans.joined(separator: "\n"))")
        if ProcessInfo.processInfo.environment["SHOW_PLANS"] != nil { print(plans.joined(separator: "\n")) }
    }

    /// A store from the day boundedGrowth made a full push(appId, id) index (the planner took it
    /// over push_queued, and the dispatcher's reads scanned every push of the app) loses it.
    @Test func theFirstBoundedGrowthsFullPushIndexIsDropped() async throws {
        let path = TemporaryDirectory.make() + "/bgd.sqlite"
        _ = try BackgroundStore.open(atPath: path, durability: .normal)
        let database = try DatabaseQueue(path: path)
        try await database.write { db in
            try db.execute(sql: "DROP INDEX push_settledByApp")
            try db.execute(sql: "CREATE INDEX push_byApp ON push(appId, id)")
            try db.execute(sql: "DELETE FROM grdb_migrations WHERE identifier = 'openEvents'")
            for index in ["event_open", "event_openOfRun", "event_openOfSession", "event_expiredDownload"] {
                try db.execute(sql: "DROP INDEX \(index)")
            }
        }
        try database.close()
        _ = try BackgroundStore.open(atPath: path, durability: .normal)
        let indexes = try await DatabaseQueue(path: path).read { db in
            try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'push'")
        }
        #expect(!indexes.contains("push_byApp") && indexes.contains("push_settledByApp"), "\(indexes)")
    }
}
