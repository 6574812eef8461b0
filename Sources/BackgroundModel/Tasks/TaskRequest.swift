import Foundation

/// The two kinds of `BGTaskScheduler` request.
public enum TaskKind: String, Codable, Sendable, CaseIterable {
    /// `BGAppRefreshTaskRequest`: a short refresh, planned by the same adaptive policy as fetch.
    case appRefresh
    /// `BGProcessingTaskRequest`: minutes of work, run only while its conditions hold and no app
    /// is in the foreground.
    case processing
}

/// A pending `BGTaskScheduler` request (`POST /v1/app/task-requests`). Submitting one with the
/// identifier of a pending request replaces it.
public struct TaskRequest: Hashable, Codable, Sendable {
    public var identifier: String
    public var kind: TaskKind
    /// Not before this (nil: as soon as the system sees fit).
    public var earliestBeginDate: Date?
    /// Processing only: wait for a network.
    public var requiresNetworkConnectivity: Bool
    /// Processing only: wait for external power.
    public var requiresExternalPower: Bool

    public init(
        identifier: String, kind: TaskKind, earliestBeginDate: Date? = nil, requiresNetworkConnectivity: Bool = false,
        requiresExternalPower: Bool = false
    ) {
        self.identifier = identifier
        self.kind = kind
        self.earliestBeginDate = earliestBeginDate
        self.requiresNetworkConnectivity = requiresNetworkConnectivity
        self.requiresExternalPower = requiresExternalPower
    }

    /// The most pending requests of each kind an app may have (the real `BGTaskScheduler`'s).
    public static func limit(of kind: TaskKind) -> Int { kind == .appRefresh ? 1 : 10 }

    /// Identifiers are reverse-DNS-like names: 1 to 200 of letters, digits, `.`, `-`, `_`.
    public static func isValidIdentifier(_ identifier: String) -> Bool {
        (1...200).contains(identifier.utf8.count)
            && identifier.utf8.allSatisfy {
                $0.isASCIIAlphanumeric || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_")
            }
    }
}

/// A pending request as bgd keeps it, for `pendingTaskRequests()` and `bgctl tasks`.
public struct PendingTaskRequest: Hashable, Codable, Sendable {
    public var app: AppID
    public var request: TaskRequest
    public var submittedAt: Date
    /// Why it has not started yet (nil: it is about to).
    public var waitingReason: DecisionReason?

    public init(app: AppID, request: TaskRequest, submittedAt: Date, waitingReason: DecisionReason? = nil) {
        self.app = app
        self.request = request
        self.submittedAt = submittedAt
        self.waitingReason = waitingReason
    }
}

/// `bgctl tasks`: every pending request, every running task with its time left, and every app's
/// finite-length background tasks.
public struct TasksOverview: Hashable, Codable, Sendable {
    public var pending: [PendingTaskRequest]
    public var running: [RunningTask]
    public var lifecycles: [LifecycleStatus]
    /// bgd's clock when it answered, so "time left" reads right whatever the client's clock says.
    public var now: Date

    public init(pending: [PendingTaskRequest], running: [RunningTask], lifecycles: [LifecycleStatus], now: Date) {
        self.now = now
        self.pending = pending
        self.running = running
        self.lifecycles = lifecycles
    }
}

/// A `BGTask` being carried out: its run and when its time is up.
public struct RunningTask: Hashable, Codable, Sendable {
    public var app: AppID
    public var identifier: String
    public var kind: TaskKind
    public var run: RunRecord

    public init(app: AppID, identifier: String, kind: TaskKind, run: RunRecord) {
        self.app = app
        self.identifier = identifier
        self.kind = kind
        self.run = run
    }
}

extension UInt8 {
    fileprivate var isASCIIAlphanumeric: Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(self) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(self)
            || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(self)
    }
}

/// Names one app's task, for `bgctl tasks run` and `bgctl tasks expire`.
public struct TaskTarget: Hashable, Codable, Sendable {
    public var app: AppID
    public var identifier: String

    public init(app: AppID, identifier: String) {
        self.app = app
        self.identifier = identifier
    }
}
