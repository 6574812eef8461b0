import BackgroundModel
import Foundation

/// How much time an app gets once it leaves the foreground, and what happens when it is up —
/// iOS's rules for `beginBackgroundTask`: the time (30 s by default) counts from entering the
/// background; the expiration handlers run `expirationLead` before the end; an app that has
/// ended its tasks by then is suspended, one that still holds any is ended. Pure: the
/// supervisor asks it at `now` for each app.
public struct BackgroundTimePolicy: Hashable, Sendable {
    public var budget: Duration
    public var expirationLead: Duration
    /// Off: an app whose time is up is ended rather than suspended.
    public var suspensionEnabled: Bool
    /// How long an app with nothing to do stays running after entering the background (or after
    /// an event), so that it can ask for time in `applicationDidEnterBackground` — iOS suspends
    /// "shortly after" too.
    public var suspensionDelay: Duration

    public init(
        budget: Duration = .seconds(30), expirationLead: Duration = .seconds(5), suspensionEnabled: Bool = true,
        suspensionDelay: Duration = .seconds(5)
    ) {
        self.budget = budget
        self.expirationLead = min(expirationLead, budget)
        self.suspensionEnabled = suspensionEnabled
        self.suspensionDelay = min(suspensionDelay, budget)
    }

    /// What the supervisor knows about one app.
    public struct Snapshot: Hashable, Sendable {
        public var state: ApplicationState
        /// When it last entered the background (or was resumed for an event).
        public var enteredBackgroundAt: Date?
        public var holdsTasks: Bool
        /// Whether its expiration handlers have been asked to run for this stretch of background.
        public var warned: Bool
        /// Whether it is handling an event (a run's budget applies meanwhile, not this one).
        public var busy: Bool
        /// Whether bgd may signal its process (false for an app inside bgd's own process): it is
        /// still warned, never suspended or ended.
        public var canSignal: Bool

        public init(
            state: ApplicationState, enteredBackgroundAt: Date?, holdsTasks: Bool, warned: Bool = false,
            busy: Bool = false,
            canSignal: Bool = true
        ) {
            self.state = state
            self.enteredBackgroundAt = enteredBackgroundAt
            self.holdsTasks = holdsTasks
            self.warned = warned
            self.busy = busy
            self.canSignal = canSignal
        }
    }

    public enum Step: Hashable, Sendable {
        /// Nothing to do now or later (in the foreground, suspended, or busy with an event).
        case none
        /// Look again at `until`.
        case wait(until: Date)
        /// Run the expiration handlers now: time ends at `deadline`.
        case warn(deadline: Date)
        /// Stop the process (SIGSTOP) until an event comes.
        case suspend(DecisionReason)
        /// End the process (SIGTERM, then SIGKILL).
        case end(DecisionReason)
    }

    /// When background time ends for an app that entered the background at `enteredAt`.
    public func deadline(enteredBackgroundAt enteredAt: Date) -> Date { enteredAt.adding(budget) }

    public func step(_ app: Snapshot, now: Date) -> Step {
        guard app.state == .background, !app.busy, let entered = app.enteredBackgroundAt else { return .none }
        let deadline = deadline(enteredBackgroundAt: entered)
        if app.holdsTasks {
            if now >= deadline {
                guard app.canSignal else { return .none }
                return .end(
                    DecisionReason(
                        .backgroundTimeOverrun,
                        "still held a background task when its \(budget.humanDescription) of background time ended; the expiration handler must end it"
                    ))
            }
            let warnAt = deadline.addingTimeInterval(-expirationLead.seconds)
            if now >= warnAt { return app.warned ? .wait(until: deadline) : .warn(deadline: deadline) }
            return .wait(until: warnAt)
        }
        guard app.canSignal else { return .none }
        if suspensionEnabled {
            let suspendAt = entered.adding(suspensionDelay)
            guard now >= suspendAt else { return .wait(until: suspendAt) }
            return .suspend(
                DecisionReason(.suspendedInBackground, "in the background with no background task or event to handle"))
        }
        if now >= deadline {
            return .end(
                DecisionReason(
                    .suspensionUnavailable, "background time is over and suspension is off (--suspension off)"))
        }
        return .wait(until: deadline)
    }

    /// `beginBackgroundTask` at `now`: granted with the deadline (nil: unlimited, in the
    /// foreground), or refused with why.
    public func grant(
        state: ApplicationState, enteredBackgroundAt: Date?, now: Date
    ) -> Result<Date?, RefusedBackgroundTime> {
        switch state {
        case .active, .inactive:
            return .success(nil)
        case .suspended:
            return .failure(
                RefusedBackgroundTime(reason: DecisionReason(.backgroundTimeExpired, "the app is suspended")))
        case .background:
            let deadline = deadline(enteredBackgroundAt: enteredBackgroundAt ?? now)
            guard now < deadline else {
                return .failure(
                    RefusedBackgroundTime(
                        reason: DecisionReason(
                            .backgroundTimeExpired, "the app's \(budget.humanDescription) of background time is over")))
            }
            return .success(deadline)
        }
    }
}

/// Why `beginBackgroundTask` answered `.invalid`.
public struct RefusedBackgroundTime: Error, Hashable, Sendable {
    public var reason: DecisionReason
}
