/// How a background run ended, as recorded in its history.
///
/// The app's own answers (`newData`, `noData`, `failed`) plus what bgd observed when the app gave
/// none: it overran its budget, exited or crashed first, could not be started, or bgd itself
/// stopped (crash, `kill -9`) while the run was in flight.
public enum RunOutcome: String, Codable, Sendable, CaseIterable {
    case newData
    case noData
    case failed
    /// The app did not answer before its budget ran out and was ended.
    case expired
    /// The app's process exited (or crashed) before it answered.
    case crashed
    /// The launch command could not be started.
    case launchFailed
    /// bgd stopped while the run was in flight; found and closed at the next start.
    case interrupted
    /// The app was unregistered, or bgd shut down cleanly, while the run was in flight; or the
    /// transfer events a `transferEvents` run was launched for expired unacknowledged.
    case cancelled
    /// A run launched for transfer events (trigger `transferEvents`): the app acknowledged every
    /// one (`urlSessionDidFinishEvents`).
    case eventsHandled

    public init(_ result: BackgroundFetchResult) {
        switch result {
        case .newData: self = .newData
        case .noData: self = .noData
        case .failed: self = .failed
        }
    }

    /// Whether the app answered at all (an answer, even `.failed`, is a completed run).
    public var isAnswer: Bool { self == .newData || self == .noData || self == .failed }
}

/// What a run carries out. Every kind goes through the same run path (one in flight per app,
/// a budget, an outcome); only fetches are what the fetch policy plans and learns from.
public enum RunKind: String, Codable, Sendable, CaseIterable {
    /// A background fetch (scheduled or asked for).
    case fetch
    /// A background push's handler.
    case push
    /// A `BGTaskScheduler` task (refresh or processing).
    case task
    /// The app launched to hear of its ended transfers.
    case events
}

/// What started a run.
public enum RunTrigger: String, Codable, Sendable {
    /// The scheduler decided the app was due.
    case scheduled
    /// Someone asked for it (`bgctl simulate fetch`, Xcode's *Simulate Background Fetch*).
    case manual
    /// A provider's background push (`content-available: 1`) through the push gateway.
    case remoteNotification
    /// Background transfers ended while the app was not running: it is launched to hear of them
    /// (`application(_:handleEventsForBackgroundURLSession:completionHandler:)`).
    case transferEvents
}
