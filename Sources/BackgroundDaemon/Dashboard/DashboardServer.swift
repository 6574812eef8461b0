import BackgroundDashboard
import BackgroundGateway
import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// How `bgctl dashboard` reaches the dashboard: its address, once bound, and its login codes.
struct DashboardAccess: Sendable {
    var host: String
    var auth: DashboardAuth
    var boundPort: BoundPort

    /// A one-time login link, once the dashboard listens.
    func login(now: Date) async -> DashboardLogin {
        let port = await boundPort.wait()
        let bracketed = host.contains(":") ? "[\(host)]" : host
        let base = "http://\(bracketed):\(port)"
        return DashboardLogin(url: base + "/login?code=" + auth.issueCode(now: now), base: base)
    }
}

/// The dashboard and `/metrics` on loopback TCP (`--http 127.0.0.1:PORT`; off unless asked):
/// server-rendered pages, SVG timelines drawn here, live updates by server-sent events. Every
/// request needs the dashboard token (see `DashboardAuth`).
public struct DashboardServer: Service {
    public struct Configuration: Sendable {
        public var host: String
        /// 0: any free port (tests); `boundPort` says which.
        public var port: Int
        /// Listen beyond loopback (the token still guards it). Off by default.
        public var allowRemote: Bool

        public init(host: String = "127.0.0.1", port: Int, allowRemote: Bool = false) {
            self.host = host
            self.port = port
            self.allowRemote = allowRemote
        }

        public var isLoopback: Bool { Loopback.contains(host) }
    }

    public enum Failure: Error, CustomStringConvertible {
        case notLoopback(String)
        public var description: String {
            switch self {
            case .notLoopback(let host):
                "the dashboard listens on loopback only, not \(host); add --http-allow-remote to serve it to other machines"
            }
        }
    }

    let configuration: Configuration
    let views: DashboardViews
    let metrics: DaemonMetrics
    let store: BackgroundStore
    let clock: any WallClock
    public let auth: DashboardAuth
    let logger: Logger
    public let boundPort = BoundPort()
    var access: DashboardAccess { DashboardAccess(host: configuration.host, auth: auth, boundPort: boundPort) }

    public func run() async throws {
        guard configuration.isLoopback || configuration.allowRemote else {
            throw Failure.notLoopback(configuration.host)
        }
        let router = Router()
        if !configuration.allowRemote {
            router.add(middleware: LoopbackHostMiddleware(listeningOn: configuration.host))
        }
        let auth = self.auth
        let (views, metrics, store, clock) = (self.views, self.metrics, self.store, self.clock)
        router.get("login") { request, _ in
            guard let code = request.uri.queryParameters["code"].map(String.init),
                auth.redeem(code, now: clock.now)
            else {
                return Self.html(
                    "<h1>This login link has expired or was used</h1><p>Run <span class=\"code\">bgctl dashboard</span> for a new one.</p>",
                    status: .unauthorized)
            }
            var headers = HTTPFields()
            headers[.location] = "/"
            let session = auth.issueSession(now: clock.now)
            let maxAge = DashboardAuth.sessionLifetime.components.seconds
            headers[.setCookie] = "\(DashboardAuth.cookieName)=\(session); Path=/; Max-Age=\(maxAge); HttpOnly; SameSite=Strict"
            return Response(status: .seeOther, headers: headers)
        }
        let pages = router.group().add(middleware: TokenMiddleware(auth: auth, clock: clock))
        pages.get("/") { request, _ in
            try await Self.page(
                request, title: "bgd",
                main: await views.overview(
                    range: DashboardRange(query: request.uri.queryParameters["range"].map(String.init))))
        }
        pages.get("apps/:id") { request, context in
            guard let raw = context.parameters.get("id"), let id = AppID(rawValue: raw),
                let main = try await views.app(
                    id, range: DashboardRange(query: request.uri.queryParameters["range"].map(String.init)))
            else {
                return Self.html("<h1>No such app</h1>", status: .notFound)
            }
            return try await Self.page(request, title: raw, main: main)
        }
        pages.get("events") { request, _ in views.events(request) }
        pages.get("metrics") { _, _ in await metrics.response(store: store) }
        let boundPort = self.boundPort
        let logger = self.logger
        let application = QuietApplication(
            responder: router.buildResponder(),
            configuration: .init(
                address: .hostname(configuration.host, port: configuration.port), serverName: "bgd-dashboard"),
            services: [views.recent],
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? 0
                boundPort.set(port)
                logger.notice(
                    "Dashboard is listening",
                    metadata: ["url": "http://\(configuration.host):\(port)/", "login": "bgctl dashboard"])
            }, logger: logger)
        try await boundPort.serve(flag: "--http", address: "\(configuration.host):\(configuration.port)") {
            try await application.run()
        }
    }

    static func page(_ request: Request, title: String, main: String) async throws -> Response {
        // Live updates ask for `<main>` alone.
        if request.headers[HTTPField.Name("X-Partial")!] == "main" { return html(main, whole: false) }
        return html(main, title: title)
    }

    /// The page's one inline script is allowed by its hash, and nothing else inline runs: markup
    /// that slipped past escaping could not run a handler. No framing, no base or form targets.
    static let contentSecurityPolicy =
        "default-src 'self'; style-src 'unsafe-inline'; script-src 'sha256-"
        + Data(SHA256.hash(data: Data(HTML.liveScript.utf8))).base64EncodedString()
        + "'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

    static func html(
        _ main: String, title: String = "bgd", status: HTTPResponse.Status = .ok, whole: Bool = true
    ) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-store"
        headers[HTTPField.Name("Content-Security-Policy")!] = contentSecurityPolicy
        headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        let body = whole ? HTML.page(title: title, main: main) : main
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}

/// Refuses requests without the dashboard token: 401 with what to do.
struct TokenMiddleware<Context: RequestContext>: RouterMiddleware {
    let auth: DashboardAuth
    let clock: any WallClock

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let (authorization, cookie) = (request.headers[.authorization], request.headers[.cookie])
        guard auth.allows(authorization: authorization, cookie: cookie, now: clock.now) else {
            var response = DashboardServer.html(
                "<h1>Sign in</h1><p>A session lasts 7 days. Run <span class=\"code\">bgctl dashboard</span> for a login link, or send <span class=\"code\">Authorization: Bearer</span> with the token in the state directory's <span class=\"code\">dashboard-token</span>.</p>",
                status: .unauthorized)
            response.headers[.wwwAuthenticate] = "Bearer realm=\"bgd\""
            return response
        }
        return try await next(request, context)
    }
}

/// What bgd keeps in memory for the timelines besides the store: the recent lifecycle moments
/// and finite-length tasks (the store does not keep them).
final class RecentActivity: Service, Sendable {
    struct Moment: Sendable {
        var app: AppID
        var at: Date
        var classes: String
        var title: String
    }
    private let moments = Mutex<[Moment]>([])
    /// The last two checkpoints of each running transfer (when, bytes), for its speed.
    private let checkpoints = Mutex<[TransferID: [(at: Date, bytes: Int64)]]>([:])
    let activity: ActivityFeed
    let clock: any WallClock

    init(activity: ActivityFeed, clock: any WallClock) {
        self.activity = activity
        self.clock = clock
    }

    func run() async throws {
        let feed = activity.subscribe()
        await cancelWhenGracefulShutdown {
            for await event in feed {
                let now = self.clock.now
                var moment: Moment?
                switch event {
                case .lifecycleChanged(let app, let state, let reason):
                    moment = Moment(
                        app: app, at: now, classes: "lifecycle \(state.rawValue)",
                        title: "\(state.rawValue)\(reason.map { ": \($0.code.rawValue)" } ?? "")")
                case .backgroundTaskBegun(let app, let id):
                    moment = Moment(
                        app: app, at: now, classes: "lifecycle task-begun", title: "background task \(id) begun")
                case .backgroundTaskEnded(let app, let id):
                    moment = Moment(
                        app: app, at: now, classes: "lifecycle task-ended", title: "background task \(id) ended")
                case .backgroundTimeExpiring(let app, _):
                    moment = Moment(app: app, at: now, classes: "lifecycle expiring", title: "background time expiring")
                case .transferCheckpointed(let id, let bytes):
                    self.checkpoints.withLock { $0[id] = Array((($0[id] ?? []) + [(now, bytes)]).suffix(2)) }
                case .transferAttemptStarted(let id), .transferRetryScheduled(let id, _, _):
                    // A new attempt measures afresh: the last one's bytes say nothing of this one's pace.
                    self.checkpoints.withLock { $0[id] = nil }
                case .transferEnded(let record):
                    self.checkpoints.withLock { $0[record.id] = nil }
                default:
                    break
                }
                if let moment { self.moments.withLock { $0 = Array(($0 + [moment]).suffix(2000)) } }
            }
        }
    }

    /// Bytes a second between the transfer's last two checkpoints in this attempt, if it had two.
    func rate(of id: TransferID) -> Double? {
        guard let samples = checkpoints.withLock({ $0[id] }), samples.count == 2 else { return nil }
        let seconds = samples[1].at.timeIntervalSince(samples[0].at)
        return seconds > 0 ? Double(samples[1].bytes - samples[0].bytes) / seconds : nil
    }

    func moments(of app: AppID?) -> [Moment] {
        moments.withLock { list in list.filter { app == nil || $0.app == app } }
    }
}
