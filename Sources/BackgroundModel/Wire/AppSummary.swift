import Foundation

/// Asks bgd to register an app (`POST /v1/apps`).
public struct RegisterAppRequest: Hashable, Codable, Sendable {
    public var id: AppID
    public var launchCommand: LaunchCommand
    public var fetchInterval: FetchInterval?
    /// The `BGTaskScheduler` identifiers the app may submit requests for (iOS's
    /// `BGTaskSchedulerPermittedIdentifiers`); others are refused with `notPermitted`.
    public var taskIdentifiers: [String]?

    public init(
        id: AppID, launchCommand: LaunchCommand, fetchInterval: FetchInterval? = nil, taskIdentifiers: [String]? = nil
    ) {
        self.taskIdentifiers = taskIdentifiers
        self.id = id
        self.launchCommand = launchCommand
        self.fetchInterval = fetchInterval
    }
}

/// The answer to a registration: the app and its token, which is shown this once.
public struct RegisteredApp: Hashable, Codable, Sendable {
    public var app: AppSummary
    public var token: String

    public init(app: AppSummary, token: String) {
        self.app = app
        self.token = token
    }
}

/// An app as bgd sees it.
public struct AppSummary: Hashable, Codable, Sendable {
    public var id: AppID
    public var launchCommand: LaunchCommand
    public var fetchInterval: FetchInterval
    public var registeredAt: Date
    /// Whether the app holds an event stream open right now.
    public var isConnected: Bool
    public var lastRun: RunRecord?
    /// When the scheduler plans to wake the app next (nil: not planned), and why.
    public var nextWake: Date?
    public var nextWakeReasons: [DecisionReason]
    /// The app's own directory in bgd's state, where its launch log and its files live.
    public var containerPath: String?
    /// Where the connected app is in its life (nil: not connected, or it never said).
    public var lifecycle: LifecycleStatus?
    /// The `BGTaskScheduler` identifiers it declared.
    public var taskIdentifiers: [String]

    public init(
        id: AppID, launchCommand: LaunchCommand, fetchInterval: FetchInterval, registeredAt: Date,
        isConnected: Bool, lastRun: RunRecord?, nextWake: Date?, nextWakeReasons: [DecisionReason],
        containerPath: String? = nil, lifecycle: LifecycleStatus? = nil, taskIdentifiers: [String] = []
    ) {
        self.lifecycle = lifecycle
        self.taskIdentifiers = taskIdentifiers
        self.id = id
        self.launchCommand = launchCommand
        self.fetchInterval = fetchInterval
        self.registeredAt = registeredAt
        self.isConnected = isConnected
        self.lastRun = lastRun
        self.nextWake = nextWake
        self.nextWakeReasons = nextWakeReasons
        self.containerPath = containerPath
    }
}

/// Sets an app's minimum fetch interval (`PUT /v1/app/fetch-interval`), like
/// `setMinimumBackgroundFetchInterval`.
public struct FetchIntervalUpdate: Hashable, Codable, Sendable {
    public var interval: FetchInterval
    public init(interval: FetchInterval) { self.interval = interval }
}

/// `bgctl dashboard`: a one-time login link (valid 10 minutes) and the dashboard's address.
public struct DashboardLogin: Hashable, Codable, Sendable {
    public var url: String
    public var base: String

    public init(url: String, base: String) {
        self.url = url
        self.base = base
    }
}
