import BackgroundModel
import BackgroundStore
import Foundation
import Hummingbird

/// Who is calling an app endpoint (the `/v1/app` group): `Authorization: Bearer <token>`, the
/// app's own token or the one bgd gave a process it launched. Sets `context.caller`, or answers
/// 401 before any route runs.
struct AppAuthentication: RouterMiddleware {
    typealias Context = APIRequestContext
    let tokens: TokenIssuer
    let store: BackgroundStore

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws
        -> Response
    {
        var context = context
        context.caller = try await caller(of: request)
        return try await next(request, context)
    }

    private func caller(of request: Request) async throws -> TokenIssuer.Bearer {
        guard let token = BearerToken.of(request.headers[.authorization]) else { throw APIError.unauthorized }
        guard !token.isEmpty, token.utf8.count <= 256 else { throw APIError.unauthorized }
        if let bearer = tokens.launchBearer(for: token) { return bearer }
        guard let app = try await store.app(forTokenHash: TokenIssuer.hash(AppToken(rawValue: token))) else {
            throw APIError.unauthorized
        }
        return TokenIssuer.Bearer(app: app, launchedForRun: nil, owner: .runningApp)
    }
}
