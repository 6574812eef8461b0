import BackgroundModel

/// Who reads an app's event stream, and so who a run is given to: the app as the user runs it
/// (any of its connections), or one process bgd launched, known by its launch token.
///
/// An app may have both at once — bgd launched it for a fetch and the user opened it meanwhile —
/// as two processes, where iOS has one. Each open event goes to one of them (`mayTake`), so that
/// the two never both handle it.
public enum StreamOwner: Hashable, Sendable {
    case runningApp
    case launched(AppToken)

    /// Whether bgd launched the process (for a run, or for events such as a session's).
    public var isLaunched: Bool { self != .runningApp }

    /// Whether a stream of this owner may take `event` (when no other stream holds it):
    /// - a run's event goes to whom the run was given (`holder`), and to no one before it is
    ///   given: a launched process serves its run, the app as the user runs it the runs given to
    ///   it while it was connected;
    /// - a transfer's event (no run) goes to the app as the user runs it when it is connected —
    ///   the instance that stays — and else to a launched process.
    public func mayTake(_ event: AppEvent, holder: StreamOwner?, runningAppConnected: Bool) -> Bool {
        if event.run != nil { return holder == self }
        return self == .runningApp || !runningAppConnected
    }
}
