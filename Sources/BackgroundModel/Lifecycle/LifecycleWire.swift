import Foundation

/// An app tells bgd its state changed (`POST /v1/app/state`). `processID` is the process that
/// bgd suspends and resumes; bgd checks it is the caller's user's and not bgd itself.
public struct LifecycleReport: Hashable, Codable, Sendable {
    public var state: ApplicationState
    public var processID: Int32

    public init(state: ApplicationState, processID: Int32) {
        self.state = state
        self.processID = processID
    }
}

/// The app's lifecycle as bgd sees it: the answer to a report or a task request, and what
/// `bgctl apps` and `bgctl tasks` show.
public struct LifecycleStatus: Hashable, Codable, Sendable {
    public var app: AppID
    public var state: ApplicationState
    public var processID: Int32?
    /// When background time runs out (nil while in the foreground: unlimited).
    public var deadline: Date?
    /// The finite-length tasks the app holds, with their names.
    public var tasks: [HeldBackgroundTask]
    /// Why the app is where it is (suspended, ended, refused more time).
    public var reason: DecisionReason?

    public init(
        app: AppID, state: ApplicationState, processID: Int32?, deadline: Date?, tasks: [HeldBackgroundTask],
        reason: DecisionReason? = nil
    ) {
        self.app = app
        self.state = state
        self.processID = processID
        self.deadline = deadline
        self.tasks = tasks
        self.reason = reason
    }
}

/// A finite-length task an app holds (`beginBackgroundTask(withName:)`).
public struct HeldBackgroundTask: Hashable, Codable, Sendable {
    public var id: BackgroundTaskIdentifier
    public var name: String?
    public var begunAt: Date

    public init(id: BackgroundTaskIdentifier, name: String?, begunAt: Date) {
        self.id = id
        self.name = name
        self.begunAt = begunAt
    }
}

/// `POST /v1/app/background-tasks`: ask for background time.
public struct BeginBackgroundTaskRequest: Hashable, Codable, Sendable {
    public var name: String?
    /// A task the process held when bgd went away, begun again under its identifier with the
    /// bgd it reconnected to (which knew nothing of it); nil for a new task.
    public var id: BackgroundTaskIdentifier?

    public init(name: String?, id: BackgroundTaskIdentifier? = nil) {
        self.name = name
        self.id = id
    }

    /// Why bgd cannot take this request's name, or nil.
    public var problem: String? { name.flatMap { PrintableText.problem(with: $0, in: "name") } }
}

/// The answer: the task's identifier and when background time ends (nil: unlimited, the app is
/// in the foreground).
public struct BackgroundTaskGrant: Hashable, Codable, Sendable {
    public var id: BackgroundTaskIdentifier
    public var deadline: Date?

    public init(id: BackgroundTaskIdentifier, deadline: Date?) {
        self.id = id
        self.deadline = deadline
    }
}
