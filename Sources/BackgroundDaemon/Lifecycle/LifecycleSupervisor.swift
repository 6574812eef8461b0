import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Logging
import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Tracks each connected app's lifecycle — active, inactive, background, suspended — and its
/// finite-length background tasks, and enforces `BackgroundTimePolicy`: expiration handlers a
/// few seconds before background time ends, then suspension (the app's cgroup frozen, or
/// SIGSTOP where that is safe) for an app that has ended its tasks, or the end (SIGTERM,
/// SIGKILL) of one that still holds any. An app suspended this way is thawed when bgd has an
/// event for it: a warm wake, far cheaper than a launch. `ProcessSupervisor` does all of it to
/// the process; this decides when.
///
/// Processes bgd launched for background work are `background` from the start and tracked, but
/// the run coordinator ends them when their work is done; they are never suspended.
public actor LifecycleSupervisor: Service {
    private struct Entry {
        /// The process the app reported (the kernel's word: the caller or its descendant).
        var processID: Int32?
        var launched: Bool
        var state: ApplicationState
        var enteredBackgroundAt: Date?
        /// The clock's `awake` then: background time is time the machine runs, whatever the
        /// wall clock is set to meanwhile (see `backgroundNow`).
        var enteredBackgroundAwake: Duration = .zero
        var warned = false
        var tasks: [BackgroundTaskIdentifier: HeldBackgroundTask] = [:]
        /// The process that began tasks before the app first said its state (the kernel's word):
        /// only that one keeps them at its first report.
        var tasksBegunBy: Int32?
        var nextTaskID = 1
        var reason: DecisionReason?
        /// Its background time is over and the supervisor is ending it.
        var ending = false
        /// `enforce` is freezing it (the freeze takes up to a second, and the actor serves other
        /// calls meanwhile); cleared by whatever wants it running, and then the freeze is undone.
        var suspending = false
    }

    /// Where `enforce` waits on another actor, and so where anything else may arrive: tests put
    /// there what arrives meanwhile (`interleave`).
    package enum EnforcePoint: Sendable {
        /// Asking whether the app's process can be suspended.
        case checking
        /// Freezing it.
        case freezing
    }
    private var interleaved: (@Sendable (EnforcePoint, AppID) async -> Void)?

    /// Runs `body` at each of `enforce`'s waits (tests only).
    package func interleave(_ body: (@Sendable (EnforcePoint, AppID) async -> Void)?) { interleaved = body }

    private let policy: BackgroundTimePolicy
    private let store: BackgroundStore
    private let broker: EventBroker
    private let activity: ActivityFeed
    private let clock: any WallClock
    private let supervisor: ProcessSupervisor
    private let killGrace: Duration
    private let logger: Logger
    private var entries: [AppID: Entry] = [:] {
        didSet { version &+= 1 }
    }
    /// What bgd has given each app to handle — its runs in flight, and transfer events — while
    /// which the run's budget applies, not background time. Kept apart from the app's state: work
    /// given before the app first said its state holds too.
    private var work: [AppID: Work] = [:]

    private struct Work {
        var runs: Set<RunID> = []
        var transferEvents = false
        var isEmpty: Bool { runs.isEmpty && !transferEvents }
    }

    private func isBusy(_ app: AppID) -> Bool { !(work[app]?.isEmpty ?? true) }
    /// Moves with every change of any app's lifecycle (the app listing's cache key).
    private var version = 0
    private let timers = Doorbell()
    /// Rung when an app enters or leaves the foreground (processing tasks wait for none).
    private let foregroundDoorbells: [Doorbell]

    public init(
        policy: BackgroundTimePolicy, store: BackgroundStore, broker: EventBroker, activity: ActivityFeed,
        clock: any WallClock,
        supervisor: ProcessSupervisor, killGrace: Duration, foregroundDoorbells: [Doorbell] = [], logger: Logger
    ) {
        self.supervisor = supervisor
        self.store = store
        self.foregroundDoorbells = foregroundDoorbells
        self.policy = policy
        self.broker = broker
        self.activity = activity
        self.clock = clock
        self.killGrace = killGrace
        self.logger = logger
    }

    // MARK: What apps tell bgd

    /// The app reports its state (`applicationDidEnterBackground` and friends).
    public func report(_ report: LifecycleReport, from app: AppID, launched: Bool) async -> LifecycleStatus {
        if launched, let user = entries[app], !user.launched, let pid = user.processID, pid != report.processID,
            AppProcessInfo.signal(pid, 0)
        {
            // A process bgd launched while the app as the user runs it lives (its stream was
            // down: bgd restarting, say): the user's instance stays the one tracked — suspended,
            // ended, in the foreground or not. The launched one is the run's, in the background.
            // Before, it took the app's record over, and the user's instance went untracked.
            return LifecycleStatus(
                app: app, state: .background, processID: report.processID, deadline: nil, tasks: [], reason: nil)
        }
        // Whether an app was in the foreground, as before anything below changes it.
        let wasActive = entries[app]?.state == .active
        if let before = entries[app], before.state == .suspended, let frozen = before.processID {
            // A frozen process sends nothing: this report was sent before the freeze, or comes
            // from another process of the app. `background` from the frozen one changes nothing.
            // Anything else thaws it — the user brought it to the front as bgd froze it, or a
            // new instance takes the app over and the old one is no longer bgd's to hold —
            // where before it stayed frozen with nothing left to thaw it.
            if frozen == report.processID && !report.state.isForeground { return status(of: app, before) }
            // Out of `suspended` before the wait: an event or an open meanwhile must not resume
            // it into the background over what it said.
            if frozen == report.processID { entries[app]?.state = report.state }
            await supervisor.thaw(frozen)
            try? await store.clearSuspension(processID: frozen)
        }
        let isNewProcess = entries[app]?.processID != report.processID
        // The state lasts as long as the process: when it exits, so does the state (an app that
        // reported `active` and exited held every processing task back for ever). The
        // supervisor watches it and says so (`processExited`).
        if isNewProcess && !launched { await supervisor.adopt(report.processID, of: app) }
        // Read after the waits: what came meanwhile (a suspension, a task, a forget) stands.
        var entry = entries[app] ?? Entry(launched: launched, state: .active)
        if entry.processID == nil {
            // Its first report: the tasks it began before (iOS's pattern: begin while active,
            // then enter the background) are this process's. Before, they were taken for another
            // process's and dropped, and the app frozen holding what it thought it held. Tasks
            // another process began (one that went away without a word) are not: held, they
            // would have this one ended for them.
            if let begun = entry.tasksBegunBy, begun != report.processID { entry.tasks = [:] }
            entry.tasksBegunBy = nil
            entry.processID = report.processID
        } else if entry.processID != report.processID {
            // A new process starts afresh: none of the old one's tasks, nor its background time.
            entry.processID = report.processID
            entry.ending = false
            entry.suspending = false  // the old process's freeze is not this one's
            entry.tasks = [:]
            entry.state = .inactive
            entry.enteredBackgroundAt = nil
            entry.warned = false
        }
        entry.launched = launched
        let now = clock.now
        // A process bgd launched is in the background whatever it says.
        let state: ApplicationState = launched ? .background : (report.state == .suspended ? .background : report.state)
        if state == .background && entry.state != .background {
            entry.enteredBackgroundAt = now
            entry.enteredBackgroundAwake = clock.awake
            entry.warned = false
        }
        if state.isForeground {
            entry.enteredBackgroundAt = nil
            entry.warned = false
        }
        // A new app counts as a change too: it may be the first to be in the foreground.
        let foregroundChanged = entries[app] == nil || wasActive != (state == .active)
        entry.state = state
        entry.reason = nil
        entries[app] = entry
        activity.emit(.lifecycleChanged(app, state, nil))
        logger.debug(
            "App reported its state",
            metadata: ["app.id": "\(app)", "state": "\(state)", "pid": "\(report.processID)"])
        timers.ring()
        if foregroundChanged { for doorbell in foregroundDoorbells { doorbell.ring() } }
        return status(of: app, entry)
    }

    /// The most background tasks an app holds at once. In the foreground each is granted with no
    /// deadline, so one never ended stayed for as long as the process did: an app that began one
    /// per request and ended none grew bgd (and every status listing) without end.
    public static let maximumBackgroundTasksPerApp = 100

    /// Why `beginTask` gave no task.
    public enum TaskRefusal: Error, Sendable {
        case timeOver(RefusedBackgroundTime)
        case tooMany
    }

    /// `beginBackgroundTask(withName:)`: an identifier, or why not. `id`: a task the app held
    /// when the last bgd went away, begun again under its identifier (held already: granted
    /// again, not twice).
    public func beginTask(
        named name: String?, for app: AppID, launched: Bool, id requested: BackgroundTaskIdentifier? = nil,
        caller: Int32? = nil
    ) -> Result<BackgroundTaskGrant, TaskRefusal> {
        let held = requested.map { entries[app]?.tasks[$0] != nil } ?? false
        guard held || (entries[app]?.tasks.count ?? 0) < Self.maximumBackgroundTasksPerApp else {
            return .failure(.tooMany)
        }
        // An app bgd did not launch that has not said its state yet is granted the time a
        // foreground app is, but not taken for one the user is looking at: with no process to
        // watch, an `active` here held every processing task back until it was unregistered.
        var entry = entries[app] ?? Entry(launched: launched, state: launched ? .background : .inactive)
        let now = clock.now
        if launched && entry.enteredBackgroundAt == nil {
            entry.enteredBackgroundAt = now
            entry.enteredBackgroundAwake = clock.awake
        }
        switch policy.grant(
            state: entry.state, enteredBackgroundAt: entry.enteredBackgroundAt, now: backgroundNow(of: entry))
        {
        case .failure(let refusal):
            entries[app] = entry
            return .failure(.timeOver(refusal))
        case .success(let deadline):
            let id = requested ?? BackgroundTaskIdentifier(rawValue: entry.nextTaskID)
            entry.nextTaskID = max(entry.nextTaskID, id.rawValue + 1)
            if !held {
                entry.tasks[id] = HeldBackgroundTask(id: id, name: name.map { String($0.prefix(200)) }, begunAt: now)
            }
            if entry.processID == nil, entry.tasksBegunBy == nil { entry.tasksBegunBy = caller }
            entries[app] = entry
            activity.emit(.backgroundTaskBegun(app, id))
            timers.ring()
            return .success(BackgroundTaskGrant(id: id, deadline: deadline.map { wallDate($0, of: entry) }))
        }
    }

    /// `endBackgroundTask(_:)`; false when the app held no such task.
    public func endTask(_ id: BackgroundTaskIdentifier, for app: AppID) -> Bool {
        guard entries[app]?.tasks.removeValue(forKey: id) != nil else { return false }
        activity.emit(.backgroundTaskEnded(app, id))
        timers.ring()
        return true
    }

    /// The process the app reported exited: it is no longer in any state, and its background
    /// tasks are gone with it.
    func processExited(_ pid: Int32, of app: AppID) async {
        guard let entry = entries[app], entry.processID == pid else { return }  // another process of it since
        entries[app] = nil
        work[app]?.transferEvents = false  // its next process is given them anew
        if entry.state == .suspended { try? await store.clearSuspension(processID: pid) }
        if entry.tasks.isEmpty {
            activity.emit(
                .lifecycleChanged(
                    app, entry.state,
                    DecisionReason(.processExited, "process \(pid) exited; was \(entry.state.rawValue)")))
        } else {
            activity.emit(.lifecycleChanged(app, .background, Self.wentAwayHolding(entry.tasks.count)))
        }
        logger.info(
            "App process exited; its state ends",
            metadata: ["app.id": "\(app)", "pid": "\(pid)", "was": "\(entry.state.rawValue)"])
        if entry.state == .active { for doorbell in foregroundDoorbells { doorbell.ring() } }
        timers.ring()
    }

    static func wentAwayHolding(_ tasks: Int) -> DecisionReason {
        DecisionReason(.backgroundTimeExpired, "the app went away holding \(tasks) background task(s); they are gone")
    }

    /// The app's stream closed. A process that is gone (crashed, ended) takes its tasks with it.
    /// One still there keeps its state: a frozen process cannot read, and a running one whose
    /// connection dropped connects again (the library does within 5 s). Its exit is watched, and
    /// clears it (`processExited`). Before, a dropped connection forgot an app holding a task —
    /// never warned, ended or suspended after — and an `active` one no longer held processing
    /// tasks back.
    public func disconnected(_ app: AppID) async {
        guard let entry = entries[app] else { return }
        // (A process bgd launched closes its stream as it exits, and its exit is the run
        // coordinator's, not this: it goes now.)
        if !entry.launched, let pid = entry.processID, AppProcessInfo.signal(pid, 0) { return }
        entries[app] = nil
        work[app]?.transferEvents = false
        if entry.state == .suspended, let pid = entry.processID { try? await store.clearSuspension(processID: pid) }
        if entry.state == .active { for doorbell in foregroundDoorbells { doorbell.ring() } }
        if !entry.tasks.isEmpty {
            activity.emit(.lifecycleChanged(app, .background, Self.wentAwayHolding(entry.tasks.count)))
        }
        timers.ring()
    }

    /// The app was unregistered.
    public func forget(_ app: AppID) async {
        work[app] = nil
        if let entry = entries.removeValue(forKey: app), entry.state == .suspended, let pid = entry.processID {
            await supervisor.thaw(pid)
            try? await store.clearSuspension(processID: pid)
        }
    }

    // MARK: Events for the app

    /// bgd has work for the app (`run`'s event, or transfer events when nil): continue it if
    /// suspended, and hold off suspension until `workEnded` for each — the run's own budget
    /// applies meanwhile.
    public func workStarted(for app: AppID, run: RunID?) async {
        if let run {
            work[app, default: Work()].runs.insert(run)
        } else {
            work[app, default: Work()].transferEvents = true
        }
        await resume(app, reason: DecisionReason(.resumedForEvent, "thawed for an event"))
    }

    /// The user opened the app: a suspended one is thawed so that it can come to the foreground
    /// (and say so); one that does not is suspended again after the usual delay.
    public func opened(_ app: AppID) async {
        await resume(app, reason: DecisionReason(.resumedForOpen, "thawed: the user opened it"))
        timers.ring()
    }

    /// Thaws `app` if it is suspended and puts it in the background with `reason`. The entry is
    /// read again after the thaw (the actor serves other calls meanwhile): only the lifecycle's
    /// own fields change, and only while it is the same process, still suspended.
    private func resume(_ app: AppID, reason: DecisionReason) async {
        guard let entry = entries[app] else { return }
        if entry.suspending {
            // Being frozen this moment: called off, and `enforce` thaws it once the freeze returns.
            // (An app that said it is `active` meanwhile stays so.)
            entries[app]?.suspending = false
            if entry.state == .background { resumed(app, reason: reason) }
            return
        }
        guard entry.state == .suspended else { return }
        let pid = entry.processID
        if let pid {
            await supervisor.thaw(pid)
            try? await store.clearSuspension(processID: pid)
        }
        guard let current = entries[app], current.processID == pid, current.state == .suspended else { return }
        resumed(app, reason: reason)
    }

    /// The app is in the background again, its time starting now.
    private func resumed(_ app: AppID, reason: DecisionReason) {
        guard var current = entries[app] else { return }
        current.state = .background
        current.enteredBackgroundAt = clock.now
        current.enteredBackgroundAwake = clock.awake
        current.warned = false
        current.reason = reason
        entries[app] = current
        activity.emit(.lifecycleChanged(app, .background, reason))
        broker.send(
            .lifecycle(state: .background, deadline: policy.deadline(enteredBackgroundAt: clock.now)), to: app,
            launched: current.launched)
        logger.debug("Resumed app", metadata: ["app.id": "\(app)", "why": "\(reason.code.rawValue)"])
    }

    /// The app is done with `run` (or, nil, with its transfer events). With nothing else to
    /// handle, an app in the background with no task gets a fresh suspension delay; one holding
    /// a task keeps its deadline, but is left the expiration lead at least — warned, then ended
    /// on the usual schedule, and told so. Before, time that ran out while a run lasted ended it
    /// at once at the run's end, warned with none left; and one run's end let the app be frozen
    /// with another's events (or transfer events) still waiting. (Its whole time afresh would
    /// let an app that sends itself pushes or transfers hold the background for good.)
    public func workEnded(for app: AppID, run: RunID?) {
        guard var pending = work[app] else { return }
        if let run {
            guard pending.runs.remove(run) != nil else { return }
        } else {
            guard pending.transferEvents else { return }
            pending.transferEvents = false
        }
        work[app] = pending.isEmpty ? nil : pending
        guard pending.isEmpty, var entry = entries[app], entry.state == .background else { return timers.ring() }
        let left: Duration? =
            if entry.tasks.isEmpty { policy.budget } else if timeLeft(of: entry) < policy.expirationLead {
                policy.expirationLead
            } else { nil }  // its deadline stands
        if let left {
            // Its background clock set so that `left` remains: as if it entered the background
            // `budget - left` ago.
            entry.enteredBackgroundAt = clock.now.adding(left - policy.budget)
            entry.enteredBackgroundAwake = clock.awake - (policy.budget - left)
            entry.warned = false
            entries[app] = entry
            broker.send(
                .lifecycle(state: .background, deadline: clock.now.adding(left)), to: app, launched: entry.launched)
        }
        timers.ring()
    }

    /// The background time the app has left, on its own clock.
    private func timeLeft(of entry: Entry) -> Duration {
        guard let entered = entry.enteredBackgroundAt else { return policy.budget }
        return policy.deadline(enteredBackgroundAt: entered).duration(since: backgroundNow(of: entry))
    }

    // MARK: Reading

    public func statuses() -> [LifecycleStatus] {
        entries.sorted { $0.key.rawValue < $1.key.rawValue }.map { status(of: $0.key, $0.value) }
    }

    public func status(of app: AppID) -> LifecycleStatus? { entries[app].map { status(of: app, $0) } }

    /// The process of `app` the user runs, as it last reported itself; nil when the last to
    /// report was one bgd launched (or none has).
    public func runningProcess(of app: AppID) -> Int32? {
        entries[app].flatMap { $0.launched ? nil : $0.processID }
    }

    /// Every tracked app's status by app, in one call (the app listing), and the version it is.
    public func statusesByApp() -> (statuses: [AppID: LifecycleStatus], version: Int) {
        (Dictionary(uniqueKeysWithValues: entries.map { ($0.key, status(of: $0.key, $0.value)) }), version)
    }

    /// The version `statusesByApp` would say, without building them.
    public var statusVersion: Int { version }

    /// An app the user is looking at, if any (processing tasks wait while there is one).
    public var appInForeground: AppID? {
        entries.filter { $0.value.state == .active }.map(\.key).min { $0.rawValue < $1.rawValue }
    }

    private func status(of app: AppID, _ entry: Entry) -> LifecycleStatus {
        LifecycleStatus(
            app: app, state: entry.state, processID: entry.processID,
            deadline: entry.state == .background
                ? entry.enteredBackgroundAt.map { wallDate(policy.deadline(enteredBackgroundAt: $0), of: entry) } : nil,
            tasks: entry.tasks.values.sorted { $0.id.rawValue < $1.id.rawValue }, reason: entry.reason)
    }

    /// How soon a suspension the store or the kernel refused is tried again. Before, the app
    /// ran on unsuspended until something unrelated rang the enforcer.
    public static let suspensionRetry = Duration.seconds(30)

    // MARK: Background time

    /// Where the app's background time stands, as the policy reads it: when it entered the
    /// background, plus the time the machine has run since. A wall clock set meanwhile neither
    /// grants an hour more nor ends the app at once, and a machine's sleep spends none of it
    /// (before, every app holding a task was ended as the machine woke).
    private func backgroundNow(of entry: Entry) -> Date {
        guard let entered = entry.enteredBackgroundAt else { return clock.now }
        return entered.adding(clock.awake - entry.enteredBackgroundAwake)
    }

    /// A time on the app's background clock as the wall-clock date it comes at: what the app
    /// and the operator are told.
    private func wallDate(_ date: Date, of entry: Entry) -> Date {
        clock.now.adding(date.duration(since: backgroundNow(of: entry)))
    }

    // MARK: Enforcing

    public func run() async throws {
        await timers.serve("lifecycle", on: clock, logger: logger, untilElapsed: { await self.enforce() })
        // bgd is going away: nobody would thaw a frozen app.
        for entry in entries.values where entry.state == .suspended {
            if let pid = entry.processID {
                await supervisor.thaw(pid)
                try? await store.clearSuspension(processID: pid)
            }
        }
    }

    private func enforce() async -> Duration? {
        let now = clock.now
        var next: Duration?
        func wake(after wait: Duration) {
            let at = clock.elapsed + max(.zero, wait)
            next = min(next ?? at, at)
        }
        for app in entries.keys.sorted(by: { $0.rawValue < $1.rawValue }) {
            // Read afresh for each app, and again after each wait: the actor serves other calls
            // meanwhile (the app reports `active`, ends its task, gets an event, exits).
            guard let before = entries[app], !before.ending else { continue }  // ending: the supervisor has it
            var canSuspend = false
            if !before.launched, let pid = before.processID {
                canSuspend = await supervisor.canSuspend(pid)
                await interleaved?(.checking, app)
            }
            guard let entry = entries[app], !entry.ending, entry.processID == before.processID else { continue }
            let snapshot = BackgroundTimePolicy.Snapshot(
                state: entry.state, enteredBackgroundAt: entry.enteredBackgroundAt, holdsTasks: !entry.tasks.isEmpty,
                warned: entry.warned,
                busy: isBusy(app), canSignal: canSuspend)
            let appNow = backgroundNow(of: entry)
            switch policy.step(snapshot, now: appNow) {
            case .none:
                continue
            case .wait(let until):
                wake(after: until.duration(since: appNow))
            case .warn(let onItsClock):
                let deadline = wallDate(onItsClock, of: entry)
                logger.debug("Background time expiring", metadata: ["app.id": "\(app)", "deadline": "\(deadline)"])
                entries[app]?.warned = true
                broker.send(.backgroundTimeExpiring(deadline: deadline), to: app, launched: entry.launched)
                activity.emit(.backgroundTimeExpiring(app, deadline))
                wake(after: onItsClock.duration(since: appNow))
            case .suspend(let reason):
                guard let pid = entry.processID else { continue }
                // Written down first: a bgd killed while the app is frozen thaws it at its next start.
                do {
                    try await store.recordSuspension(
                        of: app, processID: pid, startTicks: LaunchedProcess.startTicks(of: pid), now: now)
                } catch {
                    logger.warning(
                        "Cannot record a suspension; not suspending, and trying again in 30 s",
                        metadata: ["app.id": "\(app)", "error": "\(error)"])
                    wake(after: Self.suspensionRetry)
                    continue
                }
                // The actor let others in while the store wrote: an event or a task may have come.
                let current = entries[app]
                let stillIdle =
                    current?.state == .background && !isBusy(app) && current?.tasks.isEmpty == true
                    && current?.processID == pid
                guard stillIdle else {
                    try? await store.clearSuspension(processID: pid)
                    continue
                }
                entries[app]?.suspending = true
                let frozen = await supervisor.freeze(pid)
                await interleaved?(.freezing, app)
                // Anything that came while it froze — an event, the user opening it, a task, a
                // report — called it off: undone, never left frozen with work waiting.
                let after = entries[app]
                if after?.processID == pid { entries[app]?.suspending = false }
                let stillWanted =
                    after?.processID == pid && after?.suspending == true && after?.state == .background
                    && !isBusy(app) && after?.tasks.isEmpty == true
                guard frozen, stillWanted else {
                    if frozen { await supervisor.thaw(pid) }
                    try? await store.clearSuspension(processID: pid)
                    // A freeze that failed is tried again; one called off was called off by news
                    // that rings the enforcer itself.
                    if !frozen { wake(after: Self.suspensionRetry) }
                    continue
                }
                entries[app]?.state = .suspended
                entries[app]?.reason = reason
                activity.emit(.lifecycleChanged(app, .suspended, reason))
                logger.debug("Suspended app", metadata: ["app.id": "\(app)", "pid": "\(pid)"])
            case .end(let reason):
                // Marked before the wait below, while the entry is still the one decided on.
                entries[app]?.ending = true
                entries[app]?.reason = reason
                if !entry.warned {
                    broker.send(.backgroundTimeExpiring(deadline: now), to: app, launched: entry.launched)
                }
                if let pid = entry.processID { await supervisor.terminate(pid, killAfter: killGrace) }
                activity.emit(.lifecycleChanged(app, .background, reason))
                logger.info("Ended app: background time over", metadata: ["app.id": "\(app)", "reason": "\(reason)"])
            }
        }
        return next
    }
}
