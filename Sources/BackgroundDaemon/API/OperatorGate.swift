import BackgroundModel
import BackgroundStore
import Hummingbird

/// Every endpoint outside `/v1/app/` is the operator's: it needs the operator token (which
/// `bgctl` sends), and is refused to a caller presenting an app's token and to a process bgd
/// launched (or its child), whatever token it sends — the kernel names the caller (D4).
struct OperatorGate: RouterMiddleware {
    typealias Context = APIRequestContext
    let credential: OperatorCredential
    let tokens: TokenIssuer
    let store: BackgroundStore
    let launchedApp: @Sendable (Int32) async -> AppID?

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let path = request.uri.path
        guard !(path == "/v1/app" || path.hasPrefix("/v1/app/")) else { return try await next(request, context) }
        let presented = BearerToken.of(request.headers[.authorization])
        if let peer = await PeerCredentials.of(context.channel), let app = await launchedApp(peer.processID) {
            throw APIError(
                .forbidden, .operatorOnly,
                "\(path) is the operator's; process \(peer.processID) belongs to \(app), which bgd launched, so it may call only /v1/app/"
            )
        }
        guard let presented, !presented.isEmpty, presented.utf8.count <= 256 else {
            throw APIError.operatorCredentialMissing(credential.path)
        }
        if credential.accepts(presented) { return try await next(request, context) }
        let appToken = try? await store.app(forTokenHash: TokenIssuer.hash(AppToken(rawValue: presented)))
        if tokens.launchBearer(for: presented) != nil || appToken != nil {
            throw APIError(.forbidden, .operatorOnly, "\(path) is the operator's; an app's token reaches only /v1/app/")
        }
        throw APIError.operatorCredentialMissing(credential.path)
    }
}

extension APIError {
    static func operatorCredentialMissing(_ path: String) -> APIError {
        APIError(
            .unauthorized, .operatorCredentialRequired,
            "this endpoint is the operator's: send 'Authorization: Bearer <token>' with the token in \(path) (bgctl does), or use bgctl"
        )
    }
}
