import BackgroundModel

/// An error from the Background library. A struct over a private code, so new cases never break
/// an app's `switch`; compare with the static members.
public struct BackgroundError: Error, Equatable, CustomStringConvertible {
    private enum Code: Equatable {
        case daemonUnreachable
        case daemonUnresponsive
        case socketNotPermitted
        case api(status: Int, code: String)
        case notLaunchedByDaemon
        case noTokenFile
        case protocolViolation
        case disconnected
    }

    private let code: Code
    /// What happened and what to do, in a sentence.
    public let reason: String

    private init(_ code: Code, _ reason: String) {
        self.code = code
        self.reason = reason
    }

    public var description: String { reason }

    public static func == (lhs: BackgroundError, rhs: BackgroundError) -> Bool { lhs.code == rhs.code }

    /// bgd could not be reached on its socket.
    public static func daemonUnreachable(_ socketPath: String, _ underlying: String) -> BackgroundError {
        BackgroundError(
            .daemonUnreachable,
            "cannot reach bgd at \(socketPath) (\(underlying)); is it running? Start it with `swift run bgd` in a clone, "
                + "or `systemctl --user start bgd` where it is installed as a service (bgctl install-service)")
    }

    /// bgd's socket is there, but not this user's to connect to: bgd is likely running, as
    /// another user. Not "is it running?" — starting another would not help.
    public static func socketNotPermitted(_ socketPath: String) -> BackgroundError {
        BackgroundError(
            .socketNotPermitted,
            "bgd's socket \(socketPath) is not this user's to use (permission denied): run as the user bgd runs as, "
                + "or pass --socket (BGD_SOCKET) for a bgd of your own")
    }

    /// bgd took the request and did not answer in time: it runs, but is busy or stuck. Not
    /// "is it running?" — it is, and starting another would not help.
    public static func daemonUnresponsive(_ socketPath: String, within timeout: Duration) -> BackgroundError {
        BackgroundError(
            .daemonUnresponsive,
            "bgd at \(socketPath) took the request and did not answer within \(timeout.formatted(.units(allowed: [.seconds, .milliseconds]))): "
                + "it is running but busy or stuck. Try again; if it keeps happening, see its log "
                + "(journalctl --user -u bgd) or restart it (systemctl --user restart bgd)")
    }

    /// bgd answered with an API error: `apiCode` is the stable code, e.g. `unknownApp`.
    public static func api(status: Int, code: String, reason: String) -> BackgroundError {
        BackgroundError(.api(status: status, code: code), reason)
    }

    /// The process was not started by bgd (no `BGD_APP_ID`/`BGD_APP_TOKEN` in its environment).
    public static let notLaunchedByDaemon = BackgroundError(
        .notLaunchedByDaemon,
        "this process was not launched by bgd (BGD_APP_ID and BGD_APP_TOKEN are not set); "
            + "pass the app id and the token `bgctl register` printed instead")

    /// `BackgroundApplication(appID:)` found no token in the app's container.
    public static func noTokenFile(_ path: String, app: AppID) -> BackgroundError {
        BackgroundError(
            .noTokenFile,
            "no token for \(app) at \(path): register the app first (bgctl register), or bgctl token \(app) --rotate; "
                + "for a bgd started with another --state-dir, set BGD_APP_TOKEN (`bgctl token \(app)` prints it)")
    }

    static func protocolViolation(_ what: String) -> BackgroundError {
        BackgroundError(.protocolViolation, "bgd sent something this library does not understand: \(what)")
    }

    /// The event stream closed.
    public static let disconnected = BackgroundError(.disconnected, "bgd closed the event stream")

    /// Whether bgd could not be reached at all (not running, no socket, no permission to it).
    public var isDaemonUnreachable: Bool { code == .daemonUnreachable }

    /// Whether bgd's socket is not this user's to use (`socketNotPermitted`).
    public var isSocketNotPermitted: Bool { code == .socketNotPermitted }

    /// Whether bgd took the request and did not answer in time (running, but busy or stuck).
    public var isDaemonUnresponsive: Bool { code == .daemonUnresponsive }

    /// The API's stable error code, when bgd answered with one, as bgd spelled it.
    public var apiCode: String? {
        if case .api(_, let code) = code { return code }
        return nil
    }

    /// The API's error code, to compare with `APIErrorCode`'s cases (nil: no API answer, or a
    /// code this library does not know yet — `apiCode` has it).
    public var apiErrorCode: APIErrorCode? { apiCode.flatMap(APIErrorCode.init(rawValue:)) }

    /// Whether bgd answered with a refusal that asking again will not change: a 4xx (an unknown
    /// app, a revoked token, a request this library got wrong), but not 408 or 429, which ask
    /// the caller to try again later. A 5xx is bgd's own trouble, and passes too.
    public var isLastingRefusal: Bool {
        guard let status = httpStatus else { return false }
        return (400..<500).contains(status) && status != 408 && status != 429
    }

    /// The HTTP status, when bgd answered with an error.
    public var httpStatus: Int? {
        if case .api(let status, _) = code { return status }
        return nil
    }
}
