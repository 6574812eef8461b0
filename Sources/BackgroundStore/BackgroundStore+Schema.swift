import GRDB

extension BackgroundStore {
    /// Migrations, registered by name; never edit one that has shipped, add another.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.create(table: "app") { t in
                t.primaryKey("id", .text)
                t.column("launchCommand", .text).notNull()  // JSON argv
                t.column("fetchInterval", .text).notNull()  // "never", "minimum" or seconds
                t.column("tokenHash", .text).notNull().unique()
                t.column("lastEventSeq", .integer).notNull().defaults(to: 0)
                t.column("registeredAt", .datetime).notNull()
            }
            try db.create(table: "usage") { t in
                t.autoIncrementedPrimaryKey("id")
                t.belongsTo("app", onDelete: .cascade).notNull()
                t.column("openedAt", .datetime).notNull()
            }
            try db.create(table: "run") { t in
                t.autoIncrementedPrimaryKey("id")
                t.belongsTo("app", onDelete: .cascade).notNull()
                t.column("kind", .text).notNull()  // "fetch"; push and tasks later
                t.column("trigger", .text).notNull()
                t.column("reasons", .text).notNull()  // JSON [DecisionReason]
                t.column("startedAt", .datetime).notNull()
                t.column("deadline", .datetime).notNull()
                t.column("endedAt", .datetime)
                t.column("outcome", .text)  // nil while in flight
                t.column("launched", .boolean).notNull().defaults(to: false)
                t.column("pid", .integer)
                t.column("pidStartTicks", .integer)  // /proc/<pid>/stat starttime, guards pid reuse
                t.column("detail", .text)
            }
            // At most one run in flight per app: the database refuses a second.
            try db.execute(sql: "CREATE UNIQUE INDEX run_oneInFlight ON run(appId) WHERE outcome IS NULL")
            try db.create(index: "run_byAppStart", on: "run", columns: ["appId", "startedAt"])
            try db.create(table: "event") { t in
                t.belongsTo("app", onDelete: .cascade).notNull()
                t.column("seq", .integer).notNull()
                t.column("kind", .text).notNull()
                t.column("body", .text).notNull()  // JSON AppEvent.Body
                t.column("runId", .integer)
                t.column("createdAt", .datetime).notNull()
                t.column("closedAt", .datetime)  // acknowledged by the app, or settled by bgd
                t.column("closedBy", .text)  // "app", "runEnded" or "expired"
                t.primaryKey(["appId", "seq"])
            }
            try db.create(table: "wakePlan") { t in
                t.primaryKey("appId", .text).references("app", onDelete: .cascade)
                t.column("decidedAt", .datetime).notNull()
                t.column("dueAt", .datetime)
                t.column("reasons", .text).notNull()
            }
        }
        migrator.registerMigration("wakePlanBasis") { db in
            // The newest finished run a decision took into account, so a reader can tell a plan
            // made before a run ended from one made after.
            try db.alter(table: "wakePlan") { t in t.add(column: "basedOnRunId", .integer) }
        }
        migrator.registerMigration("settings") { db in
            // Small operator settings that must survive a restart (the condition overrides).
            try db.create(table: "setting") { t in
                t.primaryKey("key", .text)
                t.column("value", .text).notNull()  // JSON
            }
        }
        migrator.registerMigration("transfers") { db in
            try db.create(table: "transfer") { t in
                t.autoIncrementedPrimaryKey("id")
                t.belongsTo("app", onDelete: .cascade)  // nil: the operator's own download
                t.column("session", .text).notNull()
                t.column("request", .text).notNull()  // JSON TransferRequest, as submitted
                t.column("state", .text).notNull()
                t.column("bytesDone", .integer).notNull().defaults(to: 0)  // the durable checkpoint
                t.column("bytesTotal", .integer)
                t.column("validator", .text)  // JSON DownloadCheckpoint.Validator
                t.column("attempts", .integer).notNull().defaults(to: 0)  // counted before each attempt runs
                t.column("restarts", .integer).notNull().defaults(to: 0)
                t.column("consecutiveFailures", .integer).notNull().defaults(to: 0)
                t.column("nextAttemptAt", .datetime)
                t.column("waitingReason", .text)
                t.column("lastError", .text)
                t.column("error", .text)  // JSON TransferError
                t.column("statusCode", .integer)
                t.column("partialPath", .text).notNull()
                t.column("destination", .text)
                t.column("createdAt", .datetime).notNull()
                t.column("lastProgressAt", .datetime).notNull()
                t.column("finishedAt", .datetime)
            }
            try db.create(index: "transfer_byState", on: "transfer", columns: ["state"])
            try db.create(index: "transfer_bySession", on: "transfer", columns: ["appId", "session"])
        }
        migrator.registerMigration("push") { db in
            // Tokens outlive their app: a push to the token of an unregistered app answers
            // 410 Unregistered with the time it stopped being valid.
            try db.create(table: "deviceToken") { t in
                t.primaryKey("token", .text)
                t.column("appId", .text).notNull().indexed()
                t.column("createdAt", .datetime).notNull()
                t.column("revokedAt", .datetime)
            }
            try db.create(table: "providerKey") { t in
                t.primaryKey("keyId", .text)
                t.column("teamId", .text).notNull()
                t.column("topics", .text).notNull()  // JSON [String]
                t.column("publicKey", .text).notNull()  // PEM; private keys are never sent nor kept
                t.column("addedAt", .datetime).notNull()
            }
        }
        migrator.registerMigration("pushQueue") { db in
            // A 200 from the gateway means the push is here, committed.
            try db.create(table: "push") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("appId", .text).notNull().indexed()
                t.column("apnsId", .text).notNull()
                t.column("pushType", .text).notNull()
                t.column("priority", .integer).notNull()
                t.column("collapseId", .text)
                t.column("expiration", .datetime)
                t.column("payload", .blob).notNull()
                t.column("receivedAt", .datetime).notNull()
                t.column("state", .text).notNull()  // queued, delivered, dropped, replaced, recorded (alerts)
                t.column("reason", .text)
            }
        }
        migrator.registerMigration("pushDecisions") { db in
            // Every push's fate carries a reason code (`bgctl why`, `bgctl push log`).
            try db.alter(table: "push") { t in t.add(column: "reasonCode", .text) }
            // The dispatcher's throttle allowance per app, so a restart of bgd does not hand
            // every app a fresh burst of wakes.
            try db.create(table: "pushAllowance") { t in
                t.primaryKey("appId", .text)
                t.column("tokens", .double).notNull()
                t.column("at", .datetime).notNull()
            }
            // The dispatcher asks which apps have pushes waiting on every pass.
            try db.execute(sql: "CREATE INDEX push_queued ON push(appId) WHERE state = 'queued'")
        }
        migrator.registerMigration("backgroundTasks") { db in
            try db.alter(table: "app") { t in t.add(column: "taskIdentifiers", .text).notNull().defaults(to: "[]") }
            // Pending BGTaskScheduler requests; one per identifier (a new submit replaces it).
            try db.create(table: "taskRequest") { t in
                t.belongsTo("app", onDelete: .cascade).notNull()
                t.column("identifier", .text).notNull()
                t.column("kind", .text).notNull()
                t.column("earliestBeginDate", .datetime)
                t.column("requiresNetwork", .boolean).notNull()
                t.column("requiresPower", .boolean).notNull()
                t.column("submittedAt", .datetime).notNull()
                t.primaryKey(["appId", "identifier"])
            }
            // The task a run carries out (kind 'task'): its identifier and kind.
            try db.alter(table: "run") { t in
                t.add(column: "taskIdentifier", .text)
                t.add(column: "taskKind", .text)
            }
        }
        migrator.registerMigration("suspensions") { db in
            // Processes bgd stopped with SIGSTOP: a bgd killed meanwhile continues them at its
            // next start (nobody else would), if the pid still has the same start time.
            try db.create(table: "suspendedProcess") { t in
                t.primaryKey("pid", .integer)
                t.column("appId", .text).notNull()
                t.column("startTicks", .integer)
                t.column("suspendedAt", .datetime).notNull()
            }
        }
        migrator.registerMigration("deliveryOnAnswer") { db in
            // A push is delivered when the app's handler has answered, not when a run was started
            // for it: the run carrying it is kept, so a run cut short puts the push back.
            try db.alter(table: "push") { t in
                t.add(column: "runId", .integer)
                t.add(column: "attempts", .integer).notNull().defaults(to: 0)
            }
            // The same apns-id twice is one push (a provider retrying). Earlier duplicates keep
            // their rows, renamed, so the index can hold.
            try db.execute(
                sql:
                    "UPDATE push SET apnsId = apnsId || '#' || id WHERE id NOT IN (SELECT min(id) FROM push GROUP BY appId, apnsId)"
            )
            try db.execute(sql: "CREATE UNIQUE INDEX push_byApnsId ON push(appId, apnsId)")
            try db.execute(sql: "CREATE INDEX push_byRun ON push(runId) WHERE runId IS NOT NULL")
            // Likewise a task request taken by a run stays, marked with it, until the run answers.
            try db.alter(table: "taskRequest") { t in t.add(column: "runId", .integer) }
        }
        migrator.registerMigration("runUsage") { db in
            // What each run cost the app: CPU time from its cgroup, peak memory where measured.
            try db.alter(table: "run") { t in
                t.add(column: "cpuMicroseconds", .integer)
                t.add(column: "memoryPeakBytes", .integer)
            }
        }
        migrator.registerMigration("retention") { db in
            // What pruning looks for, oldest first, without reading whole tables.
            try db.execute(sql: "CREATE INDEX event_byClosed ON event(closedAt) WHERE closedAt IS NOT NULL")
            try db.create(index: "push_byReceived", on: "push", columns: ["receivedAt"])
            try db.execute(sql: "CREATE INDEX run_byEnded ON run(endedAt) WHERE endedAt IS NOT NULL")
            try db.execute(sql: "CREATE INDEX transfer_byFinished ON transfer(finishedAt) WHERE finishedAt IS NOT NULL")
            try db.create(index: "usage_byOpened", on: "usage", columns: ["openedAt"])
        }
        migrator.registerMigration("readableDates") { db in
            // Before session 28 a date past 9999 from outside (a push's apns-expiration, a task's
            // earliestBeginDate, a transfer's earliestBegin) was stored as GRDB writes it — a
            // five-digit year, or '' near Int64.max seconds — and reading it back traps: bgd
            // crashed at every start. Such a value becomes the last second of 9999 (StorableDates).
            for (table, column) in [
                ("push", "expiration"), ("taskRequest", "earliestBeginDate"), ("transfer", "nextAttemptAt"),
            ] {
                try db.execute(
                    sql: """
                        UPDATE \(table) SET \(column) = '9999-12-31 23:59:59.000'
                        WHERE \(column) IS NOT NULL AND (\(column) = '' OR substr(\(column), 5, 1) <> '-')
                        """)
            }
        }
        migrator.registerMigration("boundedGrowth") { db in
            // An open is looked up by its app and time (opens a minute apart count once), and a
            // settled push by its app in id order (the newest kept per app). Partial, so that
            // the planner never takes it over push_queued for the dispatcher's reads: a full
            // index on (appId, id) made coalescing scan every push of the app (the soak: +25 %).
            try db.create(index: "usage_byApp", on: "usage", columns: ["appId", "openedAt"])
            try db.execute(
                sql: """
                    CREATE INDEX push_settledByApp ON push(appId, id)
                    WHERE state IN ('delivered', 'replaced', 'dropped', 'recorded')
                    """)
            try db.execute(
                sql: "CREATE INDEX deviceToken_byRevoked ON deviceToken(appId, revokedAt) WHERE revokedAt IS NOT NULL")
        }
        migrator.registerMigration("pushesOfUnregisteredApps") { db in
            // Before session 31 an unregistered app's pushes stayed, and a queued one stopped
            // every push dispatch after it (BackgroundStore.unregister).
            try db.execute(sql: "DELETE FROM push WHERE appId NOT IN (SELECT id FROM app)")
            try db.execute(sql: "DELETE FROM pushAllowance WHERE appId NOT IN (SELECT id FROM app)")
        }
        migrator.registerMigration("openEvents") { db in
            // The event table keeps every app's events for the history (30 days), most of them
            // closed; what bgd asks at every acknowledgement, run end and pruner pass is about
            // the open few, and read the whole table (or the app's whole history) without these
            // (EventIndexTests). Partial: an event leaves them as it closes.
            try db.execute(sql: "CREATE INDEX event_open ON event(appId, seq) WHERE closedAt IS NULL")
            try db.execute(
                sql: "CREATE INDEX event_openOfRun ON event(runId) WHERE closedAt IS NULL AND runId IS NOT NULL")
            try db.execute(
                sql: "CREATE INDEX event_openOfSession ON event(createdAt) WHERE closedAt IS NULL AND runId IS NULL")
            try db.execute(
                sql:
                    "CREATE INDEX event_expiredDownload ON event(appId) WHERE closedBy = 'expired' AND kind = 'downloadFinished'"
            )
            // A store that ran boundedGrowth as first written (one day, in development) has a
            // full push(appId, id) index, which the planner prefers over push_queued.
            try db.execute(sql: "DROP INDEX IF EXISTS push_byApp")
            try db.execute(
                sql: """
                    CREATE INDEX IF NOT EXISTS push_settledByApp ON push(appId, id)
                    WHERE state IN ('delivered', 'replaced', 'dropped', 'recorded')
                    """)
        }
        migrator.registerMigration("transferHighWater") { db in
            // The most bytes a transfer ever held: after a restart from zero (a server that
            // ignores Range answers 200) the bytes fetched again are no progress until they pass
            // it. Before, they were: a server that dropped every connection half-way was asked
            // for the whole file again at the first backoff's pace, and never failed noProgress.
            try db.execute(sql: "ALTER TABLE transfer ADD COLUMN bytesHighest INTEGER NOT NULL DEFAULT 0")
            try db.execute(sql: "UPDATE transfer SET bytesHighest = bytesDone")
        }
        migrator.registerMigration("taskRequestCrashes") { db in
            // How many of a task request's runs in a row bgd died during: a task that takes bgd
            // down with it is given up after a few, not started again at every start for ever.
            try db.execute(sql: "ALTER TABLE taskRequest ADD COLUMN crashes INTEGER NOT NULL DEFAULT 0")
        }
        return migrator
    }
}
