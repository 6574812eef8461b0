import Foundation

/// One background run of an app, as kept in its history.
public struct RunRecord: Hashable, Codable, Sendable {
    public var id: RunID
    public var app: AppID
    public var trigger: RunTrigger
    public var startedAt: Date
    /// When the budget ends; the app is told to expire a few seconds before.
    public var deadline: Date
    public var endedAt: Date?
    /// Nil while the run is in flight.
    public var outcome: RunOutcome?
    /// Why the run started when it did.
    public var reasons: [DecisionReason]
    /// Whether bgd started a process for it (false: the app was connected and got the event).
    public var launched: Bool
    /// What bgd observed, in words: an exit status, a launch error.
    public var detail: String?
    /// The process bgd started for the run, if it started one.
    public var processID: Int32?
    /// The `BGTaskScheduler` task the run carries out (nil: a fetch or a push).
    public var taskIdentifier: String?

    public init(
        id: RunID, app: AppID, trigger: RunTrigger, startedAt: Date, deadline: Date, endedAt: Date?,
        outcome: RunOutcome?, reasons: [DecisionReason], launched: Bool, detail: String?, processID: Int32? = nil,
        taskIdentifier: String? = nil
    ) {
        self.taskIdentifier = taskIdentifier
        self.id = id
        self.app = app
        self.trigger = trigger
        self.startedAt = startedAt
        self.deadline = deadline
        self.endedAt = endedAt
        self.outcome = outcome
        self.reasons = reasons
        self.launched = launched
        self.detail = detail
        self.processID = processID
    }

    public var isRunning: Bool { outcome == nil }
    public var duration: Duration? { endedAt.map { $0.duration(since: startedAt) } }
}

/// An app's report of its fetch result (`POST /v1/app/runs/{run}/result`).
public struct FetchResultReport: Hashable, Codable, Sendable {
    public var result: BackgroundFetchResult
    public init(result: BackgroundFetchResult) { self.result = result }
}

/// Acknowledges every event up to and including `seq` (`POST /v1/app/events/ack`).
public struct EventAcknowledgement: Hashable, Codable, Sendable {
    public var seq: EventSequence
    public init(seq: EventSequence) { self.seq = seq }
}

/// An event in an app's outbox, with its delivery state (`GET /v1/apps/{id}/events`).
public struct OutboxEntry: Hashable, Codable, Sendable {
    public var event: AppEvent
    /// Nil while the event waits for the app; else when it was closed, and by whom:
    /// `app` (acknowledged) or `runEnded` (its run ended, so it is no longer worth delivering).
    public var closedAt: Date?
    public var closedBy: String?

    public init(event: AppEvent, closedAt: Date?, closedBy: String?) {
        self.event = event
        self.closedAt = closedAt
        self.closedBy = closedBy
    }
}
