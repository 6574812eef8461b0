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
    /// What the run carries out (nil from a bgd older than the field).
    public var kind: RunKind?
    /// CPU time the app's processes used during the run, in microseconds (its cgroup's
    /// `cpu.stat`; without cgroups, its processes' own in /proc). Nil while it runs.
    public var cpuMicroseconds: Int64?
    /// The most memory the app held during the run, in bytes, where it can be measured.
    public var memoryPeakBytes: Int64?

    public init(
        id: RunID, app: AppID, trigger: RunTrigger, startedAt: Date, deadline: Date, endedAt: Date?,
        outcome: RunOutcome?, reasons: [DecisionReason], launched: Bool, detail: String?, processID: Int32? = nil,
        taskIdentifier: String? = nil, cpuMicroseconds: Int64? = nil, memoryPeakBytes: Int64? = nil,
        kind: RunKind? = nil
    ) {
        self.kind = kind
        self.cpuMicroseconds = cpuMicroseconds
        self.memoryPeakBytes = memoryPeakBytes
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
    public var cpuTime: Duration? { cpuMicroseconds.map { .microseconds($0) } }

    /// The CPU time as people read it ("42 ms", "1.3 s"); "-" where not measured.
    public var cpuDescription: String {
        guard let microseconds = cpuMicroseconds else { return "-" }
        if microseconds < 1_000 { return "\(microseconds) µs" }
        if microseconds < 1_000_000 { return "\(microseconds / 1_000) ms" }
        return String(format: "%.1f s", Double(microseconds) / 1_000_000)
    }

    /// The peak memory as people read it ("38 MiB"); "-" where not measured.
    public var memoryDescription: String {
        guard let bytes = memoryPeakBytes else { return "-" }
        if bytes < 1 << 20 { return "\(bytes >> 10) KiB" }
        return "\(bytes >> 20) MiB"
    }
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
    /// True: this event alone. Nil or false: every event up to and including it. The library
    /// acknowledges each event alone as its handler ends: one session's events that wait for the
    /// app to create the session stay open while later ones are handled.
    public var only: Bool?
    public init(seq: EventSequence, only: Bool? = nil) {
        self.seq = seq
        self.only = only
    }
}

/// An event in an app's outbox, with its delivery state (`GET /v1/apps/{id}/events`).
public struct OutboxEntry: Hashable, Codable, Sendable {
    public var event: AppEvent
    /// Nil while the event waits for the app; else when it was closed, and by whom:
    /// `app` (acknowledged), `runEnded` (its run ended, so it is no longer worth delivering) or
    /// `expired` (a transfer's, unacknowledged for `--keep-history`).
    public var closedAt: Date?
    public var closedBy: String?

    public init(event: AppEvent, closedAt: Date?, closedBy: String?) {
        self.event = event
        self.closedAt = closedAt
        self.closedBy = closedBy
    }
}

/// What a run cost: the app's CPU time over the run and its peak memory.
public struct RunUsage: Hashable, Codable, Sendable {
    public var cpuMicroseconds: Int64?
    public var memoryPeakBytes: Int64?

    public init(cpuMicroseconds: Int64?, memoryPeakBytes: Int64?) {
        self.cpuMicroseconds = cpuMicroseconds
        self.memoryPeakBytes = memoryPeakBytes
    }
}
