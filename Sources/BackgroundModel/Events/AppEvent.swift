import Foundation

/// A durable event in an app's outbox, delivered until the app acknowledges it.
///
/// Events are committed in the same transaction as the state change that produced them; each
/// carries the app's next sequence number, so an app (or the SDK for it) drops any `seq` it has
/// already handled and sees every event once.
public struct AppEvent: Hashable, Codable, Sendable {
    public var seq: EventSequence
    public var createdAt: Date
    public var body: Body

    public init(seq: EventSequence, createdAt: Date, body: Body) {
        self.seq = seq
        self.createdAt = createdAt
        self.body = body
    }

    /// What happened. New mechanisms add cases.
    public enum Body: Hashable, Codable, Sendable {
        /// Perform a background fetch for run `run` and report its result.
        case fetch(run: RunID, budget: Duration)
        /// A download finished: the file is at `location` (inside the app's container) until the
        /// app acknowledges this event; the app moves it away first (`didFinishDownloadingTo`).
        case downloadFinished(transfer: TransferID, session: String, taskDescription: String?, location: String)
        /// A transfer ended, with its error when it failed (`didCompleteWithError`).
        case transferCompleted(
            transfer: TransferID, session: String, taskDescription: String?, statusCode: Int?, error: TransferError?)
        /// Every event of the session so far has been given (`urlSessionDidFinishEvents`).
        case sessionEventsFinished(session: String)
        /// A background push for run `run`: `didReceiveRemoteNotification` with `payload` (the
        /// provider's JSON, as sent); answer like a fetch. `apnsID` names the push: a push whose
        /// run was cut short goes again in a new run, and the app drops one it has handled.
        case remoteNotification(run: RunID, payload: String, budget: Duration, apnsID: String? = nil)
        /// A `BGTaskScheduler` task for run `run`: the handler registered for `identifier` runs;
        /// answer with `setTaskCompleted(success:)`.
        case backgroundTask(run: RunID, identifier: String, kind: TaskKind, budget: Duration)
    }

    /// The run this event starts (a fetch, a push, a task); nil for a transfer's events.
    public var run: RunID? {
        switch body {
        case .fetch(let run, _), .remoteNotification(let run, _, _, _), .backgroundTask(let run, _, _, _): run
        case .downloadFinished, .transferCompleted, .sessionEventsFinished: nil
        }
    }

    public var kind: String {
        switch body {
        case .fetch: "fetch"
        case .downloadFinished: "downloadFinished"
        case .transferCompleted: "transferCompleted"
        case .sessionEventsFinished: "sessionEventsFinished"
        case .remoteNotification: "remoteNotification"
        case .backgroundTask: "backgroundTask"
        }
    }
}

/// The synthesised coding — `{"fetch": {"run": R, "budget": 30}}` — but with budgets in seconds,
/// as docs/api.md shows them, through a twin with `WireSeconds` where `Body` has a `Duration`.
extension AppEvent.Body {
    private enum Wire: Codable {
        case fetch(run: RunID, budget: WireSeconds)
        case downloadFinished(transfer: TransferID, session: String, taskDescription: String?, location: String)
        case transferCompleted(
            transfer: TransferID, session: String, taskDescription: String?, statusCode: Int?, error: TransferError?)
        case sessionEventsFinished(session: String)
        case remoteNotification(run: RunID, payload: String, budget: WireSeconds, apnsID: String? = nil)
        case backgroundTask(run: RunID, identifier: String, kind: TaskKind, budget: WireSeconds)
    }

    public init(from decoder: any Decoder) throws {
        switch try Wire(from: decoder) {
        case .fetch(let run, let budget): self = .fetch(run: run, budget: budget.duration)
        case .downloadFinished(let transfer, let session, let description, let location):
            self = .downloadFinished(
                transfer: transfer, session: session, taskDescription: description, location: location)
        case .transferCompleted(let transfer, let session, let description, let statusCode, let error):
            self = .transferCompleted(
                transfer: transfer, session: session, taskDescription: description, statusCode: statusCode,
                error: error)
        case .sessionEventsFinished(let session): self = .sessionEventsFinished(session: session)
        case .remoteNotification(let run, let payload, let budget, let apnsID):
            self = .remoteNotification(run: run, payload: payload, budget: budget.duration, apnsID: apnsID)
        case .backgroundTask(let run, let identifier, let kind, let budget):
            self = .backgroundTask(run: run, identifier: identifier, kind: kind, budget: budget.duration)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        let wire: Wire =
            switch self {
            case .fetch(let run, let budget): .fetch(run: run, budget: WireSeconds(budget))
            case .downloadFinished(let transfer, let session, let description, let location):
                .downloadFinished(
                    transfer: transfer, session: session, taskDescription: description, location: location)
            case .transferCompleted(let transfer, let session, let description, let statusCode, let error):
                .transferCompleted(
                    transfer: transfer, session: session, taskDescription: description, statusCode: statusCode,
                    error: error)
            case .sessionEventsFinished(let session): .sessionEventsFinished(session: session)
            case .remoteNotification(let run, let payload, let budget, let apnsID):
                .remoteNotification(run: run, payload: payload, budget: WireSeconds(budget), apnsID: apnsID)
            case .backgroundTask(let run, let identifier, let kind, let budget):
                .backgroundTask(run: run, identifier: identifier, kind: kind, budget: WireSeconds(budget))
            }
        try wire.encode(to: encoder)
    }
}

/// A message that is not durable: it concerns the connection or process at hand only.
public enum ControlMessage: Hashable, Codable, Sendable {
    /// The run's budget is about to end: cancel the handler and run expiration handlers now.
    case expire(run: RunID, deadline: Date)
    /// bgd launched this process for background work that is now done: exit.
    case exit
    /// The app's background time ends at `deadline`: run the expiration handlers of its
    /// finite-length tasks now and end them, or it is ended instead of suspended.
    case backgroundTimeExpiring(deadline: Date)
    /// bgd changed the app's state (resumed it from suspension, or moved a launched process).
    case lifecycle(state: ApplicationState, deadline: Date?)
    /// Bytes moved (`didWriteData`); not durable, sent only to a connected app.
    case transferProgress(transfer: TransferID, session: String, bytesTransferred: Int64, bytesExpected: Int64?)
}

/// One line of the event stream (`GET /v1/app/events`), newline-delimited JSON, exactly as
/// docs/api.md shows it: `{"event": {"seq": …}}`, `{"control": {"expire": {…}}}`,
/// `{"hello": {"app": …}}`. (Synthesised coding would nest the unlabelled payloads one level
/// deeper, under `_0`, which no client should have to know about.)
public enum StreamMessage: Hashable, Codable, Sendable {
    case event(AppEvent)
    case control(ControlMessage)
    /// Sent when the stream opens and as a keep-alive, so both ends notice a dead peer.
    case hello(app: AppID, launchedForRun: RunID?)

    private enum Key: String, CodingKey {
        case event, control, hello
    }

    private struct Hello: Codable {
        var app: AppID
        var launchedForRun: RunID?
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: Key.self)
        guard container.allKeys.count == 1, let key = container.allKeys.first else {
            throw DecodingError.dataCorrupted(
                .init(
                    codingPath: decoder.codingPath,
                    debugDescription: "a stream message has exactly one of 'event', 'control', 'hello'"))
        }
        switch key {
        case .event: self = .event(try container.decode(AppEvent.self, forKey: .event))
        case .control: self = .control(try container.decode(ControlMessage.self, forKey: .control))
        case .hello:
            let hello = try container.decode(Hello.self, forKey: .hello)
            self = .hello(app: hello.app, launchedForRun: hello.launchedForRun)
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: Key.self)
        switch self {
        case .event(let event): try container.encode(event, forKey: .event)
        case .control(let control): try container.encode(control, forKey: .control)
        case .hello(let app, let run): try container.encode(Hello(app: app, launchedForRun: run), forKey: .hello)
        }
    }
}
