import Foundation

/// Why an app will be woken when it will (`GET /v1/apps/{id}/why`).
public struct WakeExplanation: Hashable, Codable, Sendable {
    public var app: AppID
    public var fetchInterval: FetchInterval
    /// When the decision was made.
    public var decidedAt: Date?
    /// The next planned wake; nil when none is planned (fetch disabled, run in flight).
    public var nextWake: Date?
    public var reasons: [DecisionReason]
    public var running: RunRecord?
    public var recentRuns: [RunRecord]
    /// The newest finished run the decision took into account: a plan older than the last run
    /// has not caught up yet.
    public var basedOnRun: RunID?
    /// Background pushes that wait (held by the throttle, or for a run to end) and those dropped
    /// or replaced in the last day, newest first, each with its reason.
    public var pushes: [PushRecord]

    public init(
        app: AppID, fetchInterval: FetchInterval, decidedAt: Date?, nextWake: Date?, reasons: [DecisionReason],
        running: RunRecord?, recentRuns: [RunRecord], basedOnRun: RunID? = nil, pushes: [PushRecord] = []
    ) {
        self.basedOnRun = basedOnRun
        self.pushes = pushes
        self.app = app
        self.fetchInterval = fetchInterval
        self.decidedAt = decidedAt
        self.nextWake = nextWake
        self.reasons = reasons
        self.running = running
        self.recentRuns = recentRuns
    }
}

/// The daemon at a glance (`GET /v1/status`).
public struct DaemonStatus: Hashable, Codable, Sendable {
    public var version: String
    public var processID: Int32
    public var stateDirectory: String
    public var socketPath: String
    public var startedAt: Date
    public var now: Date
    public var appCount: Int
    public var runningRuns: Int
    public var nextEvaluation: Date?
    /// How launched apps are confined ("landlock (ABI 7): …", or "unconfined: why").
    public var appConfinement: String?
    /// How app processes are held ("cgroups: …", or "signals: why not cgroups").
    public var appProcesses: String?
    /// Where providers reach bgd's push gateway ("https://localhost:2197"); nil when it is off.
    public var pushGateway: String?

    public init(
        version: String, processID: Int32, stateDirectory: String, socketPath: String, startedAt: Date, now: Date,
        appCount: Int, runningRuns: Int, nextEvaluation: Date?, appConfinement: String? = nil,
        appProcesses: String? = nil, pushGateway: String? = nil
    ) {
        self.pushGateway = pushGateway
        self.appConfinement = appConfinement
        self.appProcesses = appProcesses
        self.version = version
        self.processID = processID
        self.stateDirectory = stateDirectory
        self.socketPath = socketPath
        self.startedAt = startedAt
        self.now = now
        self.appCount = appCount
        self.runningRuns = runningRuns
        self.nextEvaluation = nextEvaluation
    }
}
