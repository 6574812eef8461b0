import BackgroundModel
import Foundation
import Synchronization

/// An app's connection to bgd: the `UIApplication` of background work.
///
/// ```swift
/// let app = try BackgroundApplication()          // launched by bgd: reads BGD_* from the environment
/// app.onBackgroundFetch {
///     try await feed.refresh() ? .newData : .noData
/// }
/// try await app.run()                            // returns when bgd says the work is done
/// ```
///
/// A fetch handler has the run's budget (30 s by default). When the budget is about to end, the
/// handler's task is cancelled and the delegate's `applicationBackgroundFetchWillExpire(_:)`
/// runs; an app that still has not answered at the deadline is ended.
public final class BackgroundApplication: Sendable {
    public let appID: AppID
    /// Why bgd started this process; nil when the user started it (a foreground app).
    public let launchReason: LaunchReason?
    /// The app's own directory in bgd's state (set when bgd launched the process).
    public let containerPath: String?
    let client: DaemonClient
    /// What "now" is for this process (`SystemClock` but in tests).
    let clock: any WallClock
    /// The app's background URL sessions, by identifier.
    let sessions = SessionRegistry()
    /// Pushes answered already, by apns-id (a push is offered again when its run is cut short).
    let handledPushes: HandledLedger
    /// Transfer events handed to their sessions (one is sent again when its acknowledgement was lost).
    let handledTransferEvents: HandledLedger

    public typealias FetchHandler = @Sendable () async throws -> BackgroundFetchResult
    public typealias RemoteNotificationHandler = @Sendable (RemoteNotification) async throws -> BackgroundFetchResult

    struct State {
        var fetchHandler: FetchHandler?
        var remoteNotificationHandler: RemoteNotificationHandler?
        var delegate: (any BackgroundApplicationDelegate)?
        /// Events being handled now, and those handled.
        var events = TakenEvents()
        /// Events handled whose acknowledgement bgd did not take: tried again at the next hello.
        var unacknowledged: Set<EventSequence> = []
        /// Runs answered whose answer bgd did not take (a timeout, a moment's trouble), by their
        /// event: sent again when bgd sends the event again.
        var unreported: [EventSequence: (run: RunID, result: BackgroundFetchResult)] = [:]
        /// The handlers in flight, so an expiration can cancel exactly that one.
        var running: [RunID: Task<BackgroundFetchResult?, Never>] = [:]
        /// Sessions whose events this launch has announced with `handleEventsForBackgroundURLSession`.
        var announcedSessions: Set<String> = []
        /// The lifecycle as this process knows it (bgd's word wins when it sends one).
        var applicationState: ApplicationState = .active
        /// Counts the app's transitions; whether a report failed and waits to be told again.
        var stateVersion = 0
        var stateUnreported = false
        var backgroundDeadline: Date?
        /// bgd said this stretch of background time is ending (reset when it starts again).
        var expirationAnnounced = false
        var expirationHandlers: [BackgroundTaskIdentifier: @Sendable () -> Void] = [:]
        var lastBackgroundTaskRefusal: String?
        var lifecycleObservers: [UUID: AsyncStream<LifecycleNotification>.Continuation] = [:]
        /// `BGTaskScheduler` launch handlers, by identifier, and the tasks being carried out.
        var taskHandlers: [String: TaskLaunchHandler] = [:]
        var runningTasks: [RunID: BGTask] = [:]
        /// Runs whose answer comes from the delegate's completion handler: cancelled at their
        /// deadline, not at bgd's warning, so that an answer in between still counts.
        var delegateRuns: Set<RunID> = []
    }
    let state = Mutex(State())

    /// For a process bgd launched: reads `BGD_APP_ID`, `BGD_APP_TOKEN`, `BGD_SOCKET`,
    /// `BGD_LAUNCH_REASON` and `BGD_CONTAINER`. Throws `BackgroundError.notLaunchedByDaemon`
    /// when they are missing.
    public convenience init(environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        guard let rawID = environment[LaunchEnvironment.appID], let appID = AppID(rawValue: rawID),
            let token = environment[LaunchEnvironment.token], !token.isEmpty
        else { throw BackgroundError.notLaunchedByDaemon }
        self.init(
            appID: appID, token: token, socketPath: DaemonLocation.defaultSocketPath(environment: environment),
            launchReason: environment[LaunchEnvironment.reason].flatMap(LaunchReason.init(rawValue:)),
            containerPath: environment[LaunchEnvironment.container])
    }

    /// For a process the user started, with no token to copy: it is read from the app's
    /// container in bgd's state directory, where bgd keeps it (0600, the user's alone).
    public convenience init(
        appID: AppID, stateDirectory: String = DaemonLocation.defaultStateDirectory(),
        socketPath: String = DaemonLocation.defaultSocketPath()
    ) throws {
        let path = DaemonLocation.appTokenPath(of: appID, stateDirectory: stateDirectory)
        guard
            let token = try? String(contentsOfFile: path, encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines), !token.isEmpty
        else { throw BackgroundError.noTokenFile(path, app: appID) }
        // The container is where the token is: the pushes a launched process answered are
        // remembered there, and this process must see them (or it handles one twice).
        self.init(
            appID: appID, token: token, socketPath: socketPath, launchReason: nil,
            containerPath: DaemonLocation.containerPath(of: appID, stateDirectory: stateDirectory))
    }

    /// For a process the user started: the app id and the token `bgctl register` printed.
    /// `clock` is the time `backgroundTimeRemaining` and the reconnect's pauses go by (a test's
    /// clock moves as its bgd's does).
    public convenience init(
        appID: AppID, token: String, socketPath: String = DaemonLocation.defaultSocketPath(),
        clock: any WallClock = SystemClock()
    ) {
        self.init(
            appID: appID, token: token, socketPath: socketPath, launchReason: nil, containerPath: nil, clock: clock)
    }

    init(
        appID: AppID, token: String, socketPath: String, launchReason: LaunchReason?, containerPath: String?,
        clock: any WallClock = SystemClock()
    ) {
        self.clock = clock
        self.appID = appID
        self.launchReason = launchReason
        self.containerPath = containerPath
        self.handledPushes = .pushes(containerPath: containerPath)
        self.handledTransferEvents = .transferEvents(containerPath: containerPath)
        self.client = DaemonClient(socketPath: socketPath, token: token)
        // A process bgd started for background work is in the background from the start.
        if launchReason != nil { state.withLock { $0.applicationState = .background } }
    }

    /// Whether bgd started this process for background work.
    public var isLaunchedInBackground: Bool { launchReason != nil }

    /// The delegate with the iOS method names; used when no async handler is set.
    public var delegate: (any BackgroundApplicationDelegate)? {
        get { state.withLock { $0.delegate } }
        set { state.withLock { $0.delegate = newValue } }
    }

    /// Sets the async fetch handler. Expiration reaches it as task cancellation.
    public func onBackgroundFetch(_ handler: @escaping FetchHandler) {
        state.withLock { $0.fetchHandler = handler }
    }

    /// Sets the async handler for background pushes (`didReceiveRemoteNotification`).
    public func onRemoteNotification(_ handler: @escaping RemoteNotificationHandler) {
        state.withLock { $0.remoteNotificationHandler = handler }
    }

    // MARK: Calls to bgd

    /// `setMinimumBackgroundFetchInterval`: how often, at most, this app wants to be woken.
    public func setMinimumBackgroundFetchInterval(_ interval: FetchInterval) async throws {
        _ = try await client.send(
            .put, "/v1/app/fetch-interval", body: FetchIntervalUpdate(interval: interval), as: AppSummary.self)
    }

    /// Tells bgd the user opened the app (`applicationDidBecomeActive`); the scheduler learns
    /// from these when the user is likely to look.
    public func applicationDidBecomeActive() async throws {
        try await client.send(.post, "/v1/app/opens", body: nil as String?)
        try await transition(to: .active, notifying: .didBecomeActive)
    }

    /// `registerForRemoteNotifications()`: the app's device token, which a provider pushes to.
    /// The same token comes back every time until `unregisterForRemoteNotifications()`; the
    /// delegate's `application(_:didRegisterForRemoteNotificationsWithDeviceToken:)` hears it too.
    @discardableResult
    public func registerForRemoteNotifications() async throws -> String {
        let info = try await client.send(.post, "/v1/app/push/token", as: DeviceTokenInfo.self)
        delegate?.application(self, didRegisterForRemoteNotificationsWithDeviceToken: info.token)
        return info.token
    }

    /// Revokes the app's device token: pushes to it answer 410 Unregistered from now on.
    public func unregisterForRemoteNotifications() async throws {
        try await client.send(.delete, "/v1/app/push/token")
    }

    /// The app as bgd sees it: interval, last run, next planned wake.
    public func summary() async throws -> AppSummary { try await client.send(.get, "/v1/app", as: AppSummary.self) }

    // MARK: Events

    /// Connects to bgd and handles events until bgd says this background launch is done, or —
    /// for a foreground app — until the task is cancelled.
    ///
    /// A foreground app outlives bgd's restarts (an upgrade, a crash and systemd's restart): when
    /// the stream breaks it connects again — after 0.1 s, doubling to 5 s between tries — says
    /// again what state it is in, and goes on. Nothing is missed meanwhile: bgd's outbox keeps
    /// every event until the app acknowledges it, and an event seen before is acknowledged, not
    /// handled twice. It throws when bgd cannot be reached at all at first, and when bgd refuses
    /// it for good (an unregistered app, a revoked token: `isLastingRefusal`); bgd saying "not
    /// now" (too many streams for a moment, its storage failing) is tried again. A process bgd
    /// launched ends with its stream: its launch was bgd's, and a new bgd launches it anew.
    public func run() async throws {
        guard !isLaunchedInBackground else { return try await runConnection(reconnected: false, onHello: {}) }
        let connected = Mutex(false)
        var pause = Duration.milliseconds(100)
        var everConnected = false
        while true {
            connected.withLock { $0 = false }
            do {
                try await runConnection(reconnected: everConnected, onHello: { connected.withLock { $0 = true } })
            } catch let error as BackgroundError where error.isLastingRefusal {
                throw error  // bgd refused this app: trying again would not change its mind
            } catch {
                if Task.isCancelled { throw CancellationError() }
                // Never reached: say so. bgd answering "not now" (429, 5xx) is reached.
                let answered = (error as? BackgroundError)?.httpStatus != nil
                if !everConnected && !connected.withLock({ $0 }) && !answered { throw error }
            }
            if connected.withLock({ $0 }) {
                everConnected = true
                pause = .milliseconds(100)
            }
            try await clock.sleep(for: pause)
            pause = min(pause * 2, .seconds(5))
        }
    }

    /// One connection to bgd's event stream, handled until it ends.
    private func runConnection(reconnected: Bool, onHello: @escaping @Sendable () -> Void) async throws {
        let messages = try await client.stream("/v1/app/events")
        // bgd tracks a launched process from the start (its pid, for its background time).
        if isLaunchedInBackground { _ = try? await reportState(.background) }
        let deliveries = SessionDeliveries(application: self)
        do {
            try await handle(messages, deliveries: deliveries, reconnected: reconnected, onHello: onHello)
        } catch {
            await endConnection(deliveries)
            throw error
        }
        await endConnection(deliveries)
    }

    /// What a connection leaves: its sessions' deliveries stopped, and the events it took but
    /// did not finish given up, so that bgd's sending them again hands them over anew.
    private func endConnection(_ deliveries: SessionDeliveries) async {
        await deliveries.stop()
        state.withLock { state in
            state.events.giveUpUnfinished()
            state.unacknowledged.removeAll()  // bgd sends them again, and they are acknowledged then
        }
    }

    private func handle(
        _ messages: StreamMessages, deliveries: SessionDeliveries, reconnected: Bool,
        onHello: @escaping @Sendable () -> Void
    ) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            defer { group.cancelAll() }
            var greeted = false
            var lines = messages.makeAsyncIterator()
            while let line = try await lines.nextLine() {
                let message: StreamMessage
                switch line {
                case .message(let readable): message = readable
                case .unreadableEvent(let seq, let error):
                    await skip(seq, unreadable: error)
                    continue
                }
                switch message {
                case .hello:
                    onHello()
                    await acknowledgeAgain()
                    // A new bgd knows nothing of this process: tell it what state the app is in —
                    // once, at the connection's first hello. Its later hellos are keep-alives:
                    // reported at each (every 30 s), a state read just before a transition was
                    // sent after it, and a foreground app was told of as in the background.
                    if reconnected && !greeted {
                        greeted = (try? await reportCurrentState()) != nil  // else at the next
                        if greeted { await beginHeldTasksAgain() }
                    } else if isStateUnreported {
                        try? await reportCurrentState()  // a transition bgd did not take: again
                    }
                    continue
                case .event(let event):
                    switch take(event.seq) {
                    case .new: break
                    case .beingHandled: continue
                    case .handledBefore:
                        if let (run, result) = state.withLock({ $0.unreported.removeValue(forKey: event.seq) }) {
                            group.addTask { await self.post(result, of: run, seq: event.seq) }  // bgd never had it
                        } else {
                            await finish(event.seq)  // again: the ack was lost
                        }
                        continue
                    }
                    switch event.body {
                    case .fetch(let run, _), .remoteNotification(let run, _, _, _), .backgroundTask(let run, _, _, _):
                        // One path for every run: the handler's task exists before the next
                        // message is read, so an expiration that follows at once still finds it
                        // to cancel; its answer goes to bgd as the run's result.
                        let handler = startHandler(for: event.body, run: run)
                        group.addTask { await self.reportResult(run: run, seq: event.seq, handler: handler) }
                    case .downloadFinished(_, let session, _, _), .transferCompleted(_, let session, _, _, _),
                        .sessionEventsFinished(let session):
                        // In order within the session, one at a time, each acknowledged alone
                        // as it is handled: here, in order with everything else, to a session
                        // the app has created; else queued for it, out of the way: a session the
                        // app has not created yet holds its own events, not every fetch, push
                        // and expiration after them.
                        if !deliveries.isQueuing(session),
                            let existing = sessions.existing(session), !existing.hasSubmissionsUnderWay
                        {
                            _ = await handOver(event, session: session, waitingForSubmissions: false)
                            await finish(event.seq)
                        } else {
                            deliveries.enqueue(event, session: session)
                        }
                    }
                case .control(.transferProgress(let transfer, let session, let bytes, let expected)):
                    sessions.existing(session)?.progress(transfer, bytes: bytes, expected: expected)
                case .control(.expire(let run, let deadline)):
                    expire(run, deadline: deadline)
                case .control(.backgroundTimeExpiring(let deadline)):
                    backgroundTimeExpiring(deadline: deadline)
                case .control(.lifecycle(let newState, let deadline)):
                    bgdChangedState(to: newState, deadline: deadline)
                case .control(.exit):
                    if isLaunchedInBackground {
                        try await group.waitForAll()
                        return  // a session's events still waiting for it stay with bgd
                    }
                }
            }
            // The stream ended (bgd stopped): as any broken stream, the handlers are cancelled and
            // their events given up (the next bgd makes the runs up); an app the user runs connects
            // again at once, and a process bgd launched ends (a new bgd launches it anew). Before,
            // each waited for every handler first: one that waited for its expiration, which only
            // this stream could bring, held it for ever.
            if !isLaunchedInBackground { throw BackgroundError.disconnected }
            group.cancelAll()
        }
    }

    /// An event this library cannot read (a kind a newer bgd sends): it cannot be handled, so it
    /// is acknowledged, said on standard error, and the stream goes on. Before, the stream was
    /// taken for broken, and the app connected again — to be sent the same event — for ever.
    private func skip(_ seq: EventSequence, unreadable error: BackgroundError) async {
        switch take(seq) {
        case .beingHandled: return
        case .handledBefore: break  // skipped before, and that acknowledgement was lost: again
        case .new:
            FileHandle.standardError.write(
                Data("Background: event \(seq) skipped, acknowledged unhandled (update the library?): \(error)\n".utf8))
        }
        await finish(seq)
    }

    /// How many runs' handlers are under way (tests: none is left once each has ended).
    var handlersRunning: Int { state.withLock { $0.running.count } }

    /// How many runs' answers bgd has not taken yet (tests).
    var answersNotTaken: Int { state.withLock { $0.unreported.count } }

    private func take(_ seq: EventSequence) -> TakenEvents.Taking {
        state.withLock { $0.events.take(seq) }
    }

    /// `seq` is handled (or was, and its acknowledgement was lost): acknowledged alone, so that
    /// no event before it still being handled (a slow fetch, a session not yet created) is
    /// closed with it. An acknowledgement bgd does not take (its disk full, a moment's trouble)
    /// is tried again at the stream's next hello — not taken for a broken stream, which cancelled
    /// every handler in flight, to run them all again on the next connection.
    func finish(_ seq: EventSequence) async {
        state.withLock { $0.events.finish(seq) }
        await acknowledge(seq)
    }

    private func acknowledge(_ seq: EventSequence) async {
        do {
            try await client.send(.post, "/v1/app/events/ack", body: EventAcknowledgement(seq: seq, only: true))
            _ = state.withLock { $0.unacknowledged.remove(seq) }
        } catch let error as BackgroundError where error.isLastingRefusal {
            _ = state.withLock { $0.unacknowledged.remove(seq) }  // asking again would not change it
        } catch {
            _ = state.withLock { $0.unacknowledged.insert(seq) }
        }
    }

    /// The acknowledgements bgd did not take, tried again in order.
    private func acknowledgeAgain() async {
        for seq in state.withLock({ $0.unacknowledged }).sorted() { await acknowledge(seq) }
    }

    /// Starts the app's handler for a run's event (fetch, push or task) in a task of its own,
    /// registered as the run's so that an expiration can cancel it.
    private func startHandler(for body: AppEvent.Body, run: RunID) -> Task<BackgroundFetchResult?, Never> {
        let handler: Task<BackgroundFetchResult?, Never>
        var task: BGTask?
        switch body {
        case .remoteNotification(_, let payload, _, let apnsID):
            let notification = RemoteNotification(json: payload, apnsID: apnsID)
            let handledPushes = self.handledPushes
            handler = Task {
                await self.keepLedgersInContainer()
                // Answered in a run whose end bgd never heard: not handled twice.
                if let apnsID, handledPushes.contains(apnsID) { return .noData }
                let result = await self.invokeRemoteNotificationHandler(notification)
                if let apnsID, result != nil { handledPushes.record(apnsID) }
                return result
            }
        case .backgroundTask(_, let identifier, let kind, _):
            let backgroundTask = BGTask(identifier: identifier, kind: kind)
            task = backgroundTask
            handler = Task { await self.invokeTaskHandler(backgroundTask) }
        default:
            handler = Task { await self.invokeFetchHandler() }
        }
        state.withLock {
            $0.running[run] = handler
            if let task { $0.runningTasks[run] = task }
            if task == nil && $0.delegate != nil {
                let ownHandler =
                    if case .remoteNotification = body { $0.remoteNotificationHandler != nil } else {
                        $0.fetchHandler != nil
                    }
                if !ownHandler { $0.delegateRuns.insert(run) }
            }
        }
        return handler
    }

    /// Waits for the handler and sends its answer. The handler runs in a task of its own so that
    /// an expiration cancels it alone; the answer is sent from here, outside the cancelled task,
    /// so it still reaches bgd.
    private func reportResult(
        run: RunID, seq: EventSequence, handler handlerTask: Task<BackgroundFetchResult?, Never>
    ) async {
        let result = await withTaskCancellationHandler {
            await handlerTask.value
        } onCancel: {
            handlerTask.cancel()
        }
        state.withLock { state in
            state.running[run] = nil
            state.runningTasks[run] = nil
            state.delegateRuns.remove(run)
        }
        // The connection ended under the handler: the event is given up, not answered, and
        // handled anew when bgd sends it again.
        if result == nil && Task.isCancelled { return }
        if let result {
            await post(result, of: run, seq: seq)
        } else {
            await finish(seq)
        }
    }

    /// Sends a run's answer, then acknowledges its event.
    private func post(_ result: BackgroundFetchResult, of run: RunID, seq: EventSequence) async {
        do {
            _ = try await client.send(
                .post, "/v1/app/runs/\(run)/result", body: FetchResultReport(result: result), as: RunRecord.self)
        } catch let error as BackgroundError where error.apiErrorCode == .runAlreadyEnded || error.isLastingRefusal {
            // Too late (bgd already recorded the run as expired), or never to be taken.
        } catch {
            // Not taken for now (bgd's disk is full, a timeout, or bgd went away): the event stays
            // open, and the answer is kept, to be sent again when bgd sends the event again.
            // Before, that event was taken for answered and acknowledged, and the run ended
            // `expired`, the app blamed for an answer bgd never had. (A bgd that holds the answer
            // settles the event itself; one that dies makes the run up, with a new event.) Cut
            // off by the connection's end, it stays being handled, and so is given up: sent
            // again, it is handled anew.
            if !Task.isCancelled {
                state.withLock { state in
                    state.events.finish(seq)
                    state.unreported[seq] = (run, result)
                }
            }
            return
        }
        await finish(seq)
    }

    /// The app's answer; nil when the handler gave up because it was cancelled (expired).
    private func invokeFetchHandler() async -> BackgroundFetchResult? {
        let (handler, delegate) = state.withLock { ($0.fetchHandler, $0.delegate) }
        do {
            if let handler { return try await handler() }
            if let delegate {
                return await CompletionOnce.await { delegate.application(self, performFetchWithCompletionHandler: $0) }
            }
            return .noData  // nothing to do: say so, so the scheduler is not left waiting
        } catch is CancellationError {
            return nil  // expired: bgd records it
        } catch {
            return .failed
        }
    }

    /// The app's answer to a push; nil when the handler gave up because it was cancelled.
    private func invokeRemoteNotificationHandler(_ notification: RemoteNotification) async -> BackgroundFetchResult? {
        let (handler, delegate) = state.withLock { ($0.remoteNotificationHandler, $0.delegate) }
        do {
            if let handler { return try await handler(notification) }
            if let delegate {
                return await CompletionOnce.await {
                    delegate.application(self, didReceiveRemoteNotification: notification, fetchCompletionHandler: $0)
                }
            }
            return .noData
        } catch is CancellationError {
            return nil
        } catch {
            return .failed
        }
    }

    /// bgd says the run's time ends at `deadline`.
    private func expire(_ run: RunID, deadline: Date) {
        let (task, delegate, backgroundTask, byDelegate) = state.withLock {
            ($0.running[run], $0.delegate, $0.runningTasks[run], $0.delegateRuns.contains(run))
        }
        // A run answered meanwhile: nothing of it is left to wrap up (its expiration handlers
        // ran after its answer before).
        guard task != nil || backgroundTask != nil else { return }
        if let backgroundTask {
            // A BGTask's own expiration handler, whose answer may come after it returns: Apple's
            // pattern cancels an operation queue there and calls setTaskCompleted(success: false)
            // from the last operation's completion. The handler is cancelled when the time is up,
            // not at once: before, such an answer was lost and the run ended `expired`.
            backgroundTask.expire()
            if let task { cancel(task, at: deadline) }
        } else {
            // The delegate first, as on iOS: it saves state while the handler still runs. A
            // delegate's completion handler may still be called until the deadline; a handler of
            // the app's own is cancelled now, to wrap up within bgd's warning.
            delegate?.applicationBackgroundFetchWillExpire(self)
            if byDelegate, let task { cancel(task, at: deadline) } else { task?.cancel() }
        }
    }

    /// Cancels `task` once the time to `deadline` (bgd's wall clock) has really passed: a clock
    /// set back meanwhile does not hold the cancel off.
    private func cancel(_ task: Task<BackgroundFetchResult?, Never>, at deadline: Date) {
        let (clock, wait) = (self.clock, max(.zero, deadline.duration(since: clock.now)))
        Task {
            try? await clock.sleep(for: wait)
            task.cancel()
        }
    }

    /// `handleEventsForBackgroundURLSession`, once per session per launch, when launched for its
    /// events: where the app creates the session again.
    private func announceEvents(for identifier: String) {
        guard launchReason == .urlSession, let delegate else { return }
        if state.withLock({ $0.announcedSessions.insert(identifier).inserted }) {
            delegate.application(self, handleEventsForBackgroundURLSession: identifier, completionHandler: {})
        }
    }

    /// A process given only its token asks bgd for its container (until it has it): what another
    /// process of the app handled is remembered there.
    private func keepLedgersInContainer() async {
        guard !handledPushes.isKept || !handledTransferEvents.isKept,
            let container = try? await summary().containerPath
        else { return }
        handledPushes.attach(containerPath: container)
        handledTransferEvents.attach(containerPath: container)
    }

    /// A transfer's event to its session, once across the app's processes: one handed over by a
    /// process that did not live to acknowledge it is not handed over again (its file was moved
    /// away; its delegate has run), only acknowledged. Returns false, handing nothing over, when
    /// cancelled while waiting for the session.
    func handOver(_ event: AppEvent, session identifier: String, waitingForSubmissions: Bool = true) async -> Bool {
        await keepLedgersInContainer()
        let key = HandledLedger.key(of: event)
        if handledTransferEvents.contains(key) { return true }
        guard await deliverTransferEvent(event.body, session: identifier, waitingForSubmissions: waitingForSubmissions)
        else { return false }
        handledTransferEvents.record(key)
        Failpoint.eventAfterHandOver.hit()
        return true
    }

    /// The event to its session: announced first (where the app creates the session again),
    /// then delivered once the session is there and, from the session's own queue, once no
    /// caller of it is between a submission and its wait (the stream's loop hands an event
    /// over itself only when none is: it must not wait). Returns false, delivering nothing,
    /// when cancelled while waiting for the session.
    private func deliverTransferEvent(
        _ body: AppEvent.Body, session identifier: String, waitingForSubmissions: Bool
    ) async -> Bool {
        announceEvents(for: identifier)
        guard let session = await sessions.session(identifier) else { return false }
        if waitingForSubmissions { await session.submissionsSettled() }
        session.deliver(body)
        if case .sessionEventsFinished = body { _ = state.withLock { $0.announcedSessions.remove(identifier) } }
        return true
    }
}
