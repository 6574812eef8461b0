/// Where an app is in its life, as bgd tracks it (`UIApplication.State`, plus the suspension iOS
/// does not name).
///
/// A foreground app reports `active`, `inactive` and `background` itself; a process bgd starts
/// for background work is `background` from the start. bgd alone puts an app in `suspended`
/// (SIGSTOP) and takes it out (SIGCONT) when it has an event for it.
public enum ApplicationState: String, Codable, Sendable, CaseIterable {
    /// In the foreground and receiving events: background time is unlimited.
    case active
    /// In the foreground but not receiving events (a sheet over it, the screen locking).
    case inactive
    /// Not in the foreground; runs only while it holds background time or handles an event.
    case background
    /// Stopped by bgd: in memory, not running; resumed for the next event.
    case suspended

    /// Whether the user sees the app (background time does not count down).
    public var isForeground: Bool { self == .active || self == .inactive }
}

/// Identifies a finite-length background task (`UIBackgroundTaskIdentifier`).
public struct BackgroundTaskIdentifier: RawRepresentable, Hashable, Codable, Sendable, CustomStringConvertible {
    public var rawValue: Int
    public init(rawValue: Int) { self.rawValue = rawValue }

    /// What `beginBackgroundTask` returns when bgd refuses more time.
    public static let invalid = BackgroundTaskIdentifier(rawValue: 0)

    public var description: String { String(rawValue) }
}
