/// A stable code for why the scheduler did, delayed or skipped something.
///
/// Codes are part of the API: `bgctl why`, the history and (later) the dashboard show them, and
/// scripts may match on them. Add codes; never rename one.
public enum ReasonCode: String, Codable, Sendable, CaseIterable {
    /// The app's interval is `never`: it is not woken for fetch.
    case fetchDisabled
    /// The app has never been fetched; its first wake counts from registration.
    case firstFetch
    /// The app's own minimum interval sets the due time.
    case minimumInterval
    /// The system floor is longer than the app's interval and sets the due time.
    case systemFloor
    /// Recent runs answered `.failed` or crashed: the interval is stretched.
    case backoffAfterFailure
    /// Recent runs overran their budget: the app is woken less often.
    case penaltyAfterOverrun
    /// The last run was cut short by bgd stopping; it is made up at once.
    case interruptedRun
    /// A run is in flight; the next one is planned when it ends.
    case alreadyRunning
    /// Too many apps are being woken at once; this one waits for a slot.
    case concurrencyLimit
    /// The due time has come.
    case due
    /// A recorded time lies in the future (the wall clock went backwards); it is treated as now.
    case clockWentBackwards
    /// Somebody asked for this run (`bgctl simulate fetch`).
    case manualRequest
    /// The wake is placed shortly before the user is likely to open the app.
    case predictedOpen
    /// Nothing in the day ahead is likely enough to be worth a wake.
    case noLikelyOpen
    /// The app has had the wakes its use earns in the last 24 hours.
    case dailyBudgetSpent
    /// The last wake or open still keeps the content fresh.
    case stillFresh
    /// A wake is due, but a later one serves the same likely opens with fresher content.
    case closerToTheOpen
    /// The app has never been opened: it gets the rare wakes of an unused app.
    case rarelyUsed
    /// No network is up: wakes wait until one is.
    case noNetwork
    /// The battery is low and discharging: wakes wait for power (iOS's Low Power Mode).
    case lowBattery
    /// On battery: wakes not tied to a likely open come less often.
    case onBattery
    /// The only network is metered: wakes not tied to a likely open come less often.
    case meteredNetwork
    /// Held a little so that it shares one wake-up of the system with other apps due just after.
    case coalesced
    /// Fetches at this hour of day have mostly answered `.noData`: the app is woken less then.
    case usuallyNoData
    /// A provider's background push woke the app.
    case pushWake
    /// The app has had the wakes pushes may give it for now: the push waits for the next one.
    case pushThrottled
    /// The push's `apns-expiration` passed (or was 0) before the app could be woken: dropped.
    case pushExpired
    /// A newer push for the same app (and collapse id) took this one's place: the app wakes once, with the newest.
    case pushReplaced
    /// The app is already running a fetch or an earlier push: the push goes when that run ends.
    case pushWaitsForRun
    /// The run carrying the push ended before the app's handler answered (bgd stopped, the app
    /// crashed or could not start): the push waits to go again.
    case pushRetry
    /// The app's process exited: its state (active, inactive, background) ends with it.
    case processExited
    /// Transfers of the app's ended while it was not running: launched to hear of them.
    case transferEventsWaiting
    /// The push's runs ended without an answer too often, or its handler overran its budget:
    /// dropped, so one broken push does not wake the app for ever.
    case pushUndeliverable
    /// The push came through the push relay for a device token the app no longer holds (revoked
    /// after the relay accepted it): dropped, and recorded so.
    case pushTokenRevoked
    /// In the background holding no finite-length task and handling no event: stopped (SIGSTOP)
    /// until bgd has an event for it.
    case suspendedInBackground
    /// Taken out of suspension (SIGCONT) to handle an event.
    case resumedForEvent
    /// Taken out of suspension because the user opened it (`bgctl open`, a launcher): it comes
    /// to the foreground, as tapping a suspended app's icon brings it back on iOS.
    case resumedForOpen
    /// Its background time ran out while it still held finite-length tasks: ended.
    case backgroundTimeOverrun
    /// Background time is over (or the app is suspended): no more finite-length tasks.
    case backgroundTimeExpired
    /// Suspension is off (`--suspension off`) or impossible for this process: ended instead.
    case suspensionUnavailable
    /// A `BGTaskScheduler` request waits for its earliest begin date.
    case taskNotYetDue
    /// A processing task waits until no app is in the foreground.
    case appInForeground
    /// A processing task waits for external power.
    case needsExternalPower
    /// A processing task waits for a network.
    case needsNetwork
    /// A `BGTaskScheduler` request is being carried out.
    case taskStarted
    /// Somebody asked for this task now (`bgctl tasks run`).
    case manualTaskLaunch
}

/// One reason behind a decision: a stable code and a sentence with the numbers behind it.
public struct DecisionReason: Hashable, Codable, Sendable, CustomStringConvertible {
    public var code: ReasonCode
    public var detail: String

    public init(_ code: ReasonCode, _ detail: String) {
        self.code = code
        self.detail = detail
    }

    public var description: String { "\(code.rawValue): \(detail)" }
}
