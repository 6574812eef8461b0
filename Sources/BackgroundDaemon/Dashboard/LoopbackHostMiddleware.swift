import Foundation
import HTTPTypes
import Hummingbird

/// Refuses a request that names another host (`Host`/`:authority`) than a loopback one: a web page
/// on `evil.example` whose name is made to resolve to 127.0.0.1 (DNS rebinding) reaches the
/// dashboard's port, but asks for `evil.example` — 421, whatever it carries. Only on a dashboard
/// kept to loopback; one served with `--http-allow-remote` is asked for by other names.
struct LoopbackHostMiddleware<Context: RequestContext>: RouterMiddleware {
    /// The names the dashboard answers to: loopback's, and the one it was told to listen on.
    let names: Set<String>

    init(listeningOn host: String) {
        names = ["127.0.0.1", "localhost", "::1", Self.hostname(of: host)]
    }

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        guard let authority = request.head.authority,
            names.contains(Self.hostname(of: authority))
        else {
            return DashboardServer.html(
                "<h1>Not this host</h1><p>The dashboard answers to 127.0.0.1, localhost and [::1] only.</p>",
                status: .misdirectedRequest)
        }
        return try await next(request, context)
    }

    /// The host of an authority, without its port or an IPv6 literal's brackets, in lower case:
    /// `[::1]:8765` → `::1`, `LocalHost:80` → `localhost`.
    static func hostname(of authority: String) -> String {
        let lowered = authority.lowercased()
        if lowered.hasPrefix("["), let close = lowered.firstIndex(of: "]") {
            return String(lowered[lowered.index(after: lowered.startIndex)..<close])
        }
        // One colon: host:port; more: an IPv6 literal without brackets (as configured).
        return lowered.filter { $0 == ":" }.count == 1 ? String(lowered.prefix { $0 != ":" }) : lowered
    }
}
