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

    /// At most this many permitted task identifiers.
    public static let taskIdentifierLimit = 100

    private enum CodingKeys: String, CodingKey { case id, launchCommand, fetchInterval, taskIdentifiers }

    /// The task identifiers are checked as `BGTaskScheduler` requests check them: one no request
    /// could name is refused at registration, not stored.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(AppID.self, forKey: .id)
        launchCommand = try c.decode(LaunchCommand.self, forKey: .launchCommand)
        fetchInterval = try c.decodeIfPresent(FetchInterval.self, forKey: .fetchInterval)
        taskIdentifiers = try c.decodeIfPresent([String].self, forKey: .taskIdentifiers)
        if let taskIdentifiers {
            guard taskIdentifiers.count <= Self.taskIdentifierLimit else {
                throw DecodingError.dataCorruptedError(
                    forKey: .taskIdentifiers, in: c, debugDescription: "at most \(Self.taskIdentifierLimit) identifiers")
            }
            if let bad = taskIdentifiers.first(where: { !TaskRequest.isValidIdentifier($0) }) {
                throw DecodingError.dataCorruptedError(
                    forKey: .taskIdentifiers, in: c,
                    debugDescription:
                        "'\(bad.prefix(80))' is not a task identifier (1 to 200 letters, digits, '.', '-' or '_')")
            }
        }
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
