import BackgroundModel
import Foundation

/// Whether a transfer makes an attempt now, waits (until when, and why), or fails — the
/// decisions `TransferService` carries out, in one pure place: its resource timeout, its
/// no-progress timeout, its retry time, the machine's conditions (through the `ConditionGate`
/// fetches and tasks share) and a limit on transfers moving bytes at once.
public struct TransferPolicy: Hashable, Sendable {
    /// A transfer that moves no byte for this long fails with `noProgress` (BITS's default is 14 days).
    public var noProgressTimeout: Duration
    /// Transfers moving bytes at once.
    public var maximumConcurrent: Int
    public var gate: ConditionGate
    /// The longest wait a retry is ever given (the backoff's maximum, a Retry-After's bound). A
    /// stored retry time further ahead was written by a clock since set back: it is due now.
    public var longestRetryWait: Duration

    public init(
        noProgressTimeout: Duration, maximumConcurrent: Int, gate: ConditionGate = ConditionGate(),
        longestRetryWait: Duration = .seconds(86_400)
    ) {
        self.noProgressTimeout = noProgressTimeout
        self.maximumConcurrent = max(1, maximumConcurrent)
        self.gate = gate
        self.longestRetryWait = longestRetryWait
    }

    /// What the policy knows of one transfer not in an attempt now.
    public struct Snapshot: Hashable, Sendable {
        public var request: TransferRequest
        public var createdAt: Date
        /// When a byte last arrived (or the transfer was created).
        public var lastProgressAt: Date
        public var attempts: Int
        /// The retry time the store holds, if any.
        public var nextAttemptAt: Date?
        /// The retry this bgd scheduled, recorded or not (a full disk), timed on time that really
        /// passes and said as a date on today's clock: it stands over the store's, which a
        /// clock set back would put off by as much.
        public var heldUntil: Date?
        /// Time that really passed without progress in this bgd's life (the monotonic clock):
        /// a wall clock set two days ahead fails no transfer (reliability-matrix D14).
        public var silentFor: Duration
        /// What the last attempt ended with, said when the transfer fails for want of progress.
        public var lastError: String?

        public init(
            request: TransferRequest, createdAt: Date, lastProgressAt: Date, attempts: Int, nextAttemptAt: Date?,
            heldUntil: Date? = nil, silentFor: Duration, lastError: String? = nil
        ) {
            self.lastError = lastError
            self.request = request
            self.createdAt = createdAt
            self.lastProgressAt = lastProgressAt
            self.attempts = attempts
            self.nextAttemptAt = nextAttemptAt
            self.heldUntil = heldUntil
            self.silentFor = silentFor
        }
    }

    public enum Action: Hashable, Sendable {
        /// Make an attempt now.
        case attempt
        /// Its retry time has not come; nothing to record.
        case waitForRetry
        /// Conditions or the concurrency limit hold it; recorded as its waiting reason.
        case hold(DecisionReason)
        /// It ends now, failed.
        case fail(TransferError)
    }

    public struct Decision: Hashable, Sendable {
        public var action: Action
        /// When to look at it again if nothing changes first (nil: only on a change).
        public var lookAgainAt: Date?
    }

    public func decide(
        _ transfer: Snapshot, conditions: DeviceConditions, attemptsRunning: Int, now: Date
    ) -> Decision {
        let request = transfer.request
        let deadline = transfer.createdAt.adding(request.timeoutForResource)
        if now >= deadline {
            let error = TransferError(.timedOut, "not finished within \(request.timeoutForResource.humanDescription)")
            return Decision(action: .fail(error), lookAgainAt: nil)
        }
        // Silent for the timeout by the date *and* by time that really passed.
        let stalled = transfer.lastProgressAt.adding(noProgressTimeout)
        if now >= stalled, transfer.silentFor >= noProgressTimeout, transfer.attempts > 0 {
            let error = TransferError(
                .noProgress,
                "no progress for \(noProgressTimeout.humanDescription): \(transfer.lastError ?? "no answer")")
            return Decision(action: .fail(error), lookAgainAt: nil)
        }
        // Looked at again when both could be true, unless they are already and it has made no
        // attempt (only an attempt's silence fails it): before, such a transfer (held past the
        // timeout by its begin date, or on battery) was looked at again at once, for ever.
        let stallCheck = max(stalled, now.adding(max(.zero, noProgressTimeout - transfer.silentFor)))
        var lookAgainAt = stallCheck > now ? min(deadline, stallCheck) : deadline
        // The retry this bgd holds stands over the store's; a stored one further ahead than any
        // retry is given (a clock set back since it was written) is due. Before the first
        // attempt the stored time is the app's `earliestBegin`, which may be weeks ahead.
        let retry =
            transfer.heldUntil
            ?? transfer.nextAttemptAt.flatMap {
                transfer.attempts > 0 && $0 > now.adding(longestRetryWait) ? nil : $0
            }
        if let retry, retry > now {
            lookAgainAt = min(lookAgainAt, retry)
            return Decision(action: .waitForRetry, lookAgainAt: lookAgainAt)
        }
        if let hold = gate.hold(Self.needs(of: request), under: conditions) {
            if hold == .noNetwork && !request.waitsForConnectivity {
                return Decision(action: .fail(TransferError(.cannotConnect, "there is no network")), lookAgainAt: nil)
            }
            return Decision(action: .hold(DecisionReason(hold.code, Self.describe(hold))), lookAgainAt: lookAgainAt)
        }
        guard attemptsRunning < maximumConcurrent else {
            let reason = DecisionReason(
                .concurrencyLimit, "waiting for one of \(maximumConcurrent) transfers to finish")
            return Decision(action: .hold(reason), lookAgainAt: lookAgainAt)
        }
        return Decision(action: .attempt, lookAgainAt: lookAgainAt)
    }

    /// A discretionary transfer waits for mains power and an unmetered network, as iOS's do; one
    /// that may not use an expensive network waits for an unmetered one. A transfer the user
    /// asked for goes on a low battery (it is not a wake the system chose).
    static func needs(of request: TransferRequest) -> WorkNeeds {
        WorkNeeds(
            network: request.allowsExpensiveNetworkAccess && !request.isDiscretionary ? .any : .unmetered,
            externalPower: request.isDiscretionary)
    }

    static func describe(_ hold: ConditionHold) -> String {
        switch hold {
        case .noNetwork: "waiting for a network"
        case .meteredNetwork: "waiting for an unmetered network"
        case .noExternalPower: "discretionary: waiting for mains power"
        case .lowBattery(let level): "waiting while the battery is low (\(level)%)"
        }
    }
}
