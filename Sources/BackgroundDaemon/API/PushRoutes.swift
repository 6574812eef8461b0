import BackgroundModel
import BackgroundStore
import Crypto
import Foundation
import Hummingbird

/// Device tokens (an app's own, by token auth) and provider keys (the operator's). The push
/// gateway itself listens elsewhere (HTTP/2, the APNs provider API).
struct PushRoutes {
    let core: DaemonCore

    func add(to router: Router<APIRequestContext>, appGroup: RouterGroup<APIRequestContext>) {
        appGroup.post("push/token") { request, context in
            let bearer = try context.appCaller()
            return try JSONResponse.make(try await deviceToken(for: bearer.app))
        }
        appGroup.delete("push/token") { request, context in
            let bearer = try context.appCaller()
            try await core.store.revokeDeviceTokens(of: bearer.app, now: core.clock.now)
            return Response(status: .noContent)
        }
        router.get("v1/apps/:id/push/token") { _, context in
            let app = try await core.requireApp(try context.parameters.appID())
            guard let token = try await core.store.activeDeviceToken(of: app.id) else {
                throw APIError(
                    .notFound, .noDeviceToken,
                    "\(app.id) has no device token: the app gets one with registerForRemoteNotifications(), or use --create"
                )
            }
            return try JSONResponse.make(token)
        }
        router.post("v1/apps/:id/push/token") { _, context in
            let app = try await core.requireApp(try context.parameters.appID())
            return try JSONResponse.make(try await deviceToken(for: app.id))
        }
        router.get("v1/apps/:id/pushes") { request, context in
            let app = try await core.requireApp(try context.parameters.appID())
            let limit = try request.uri.integerQuery("limit", default: 50, range: 1...1000)
            return try JSONResponse.make(
                try await core.store.pushes(of: app.id, limit: limit).map(PushRecord.init))
        }
        router.get("v1/push/keys") { _, _ in try JSONResponse.make(try await core.store.providerKeys()) }
        router.post("v1/push/keys") { request, _ in
            var request = request
            var key = try await request.decodeJSON(ProviderKeyRegistration.self)
            if let problem = key.problem { throw APIError(.badRequest, .invalidProviderKey, problem) }
            guard let publicKey = try? P256.Signing.PublicKey(pemRepresentation: key.publicKeyPEM) else {
                throw APIError(
                    .badRequest, .invalidProviderKey,
                    "'publicKeyPEM' is not a P-256 public key in PEM (bgctl push keys add derives it from the .p8)")
            }
            key.publicKeyPEM = publicKey.pemRepresentation
            try await core.store.addProviderKey(key, now: core.clock.now)
            return try JSONResponse.make(try await core.store.providerKey(key.keyID), status: .created)
        }
        router.delete("v1/push/keys/:kid") { _, context in
            let keyID = context.parameters.get("kid") ?? ""
            guard try await core.store.removeProviderKey(keyID) else {
                throw APIError(.notFound, .unknownProviderKey, "no provider key \(keyID) (bgctl push keys lists them)")
            }
            return Response(status: .noContent)
        }
    }

    private func deviceToken(for app: AppID) async throws -> DeviceTokenInfo {
        try await core.store.deviceToken(for: app, makingWith: Self.makeToken, now: core.clock.now)
    }

    /// 32 random bytes as 64 lowercase hex digits, the shape of an APNs device token.
    static func makeToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &generator)) }.joined()
    }
}

extension PushRecord {
    init(_ push: StoredPush) {
        self.init(
            id: push.id, apnsID: push.apnsID, pushType: push.pushType, priority: push.priority,
            collapseID: push.collapseID,
            expiration: push.expiration, receivedAt: push.receivedAt, state: push.state, reasonCode: push.reasonCode,
            reason: push.reason,
            payload: String(decoding: push.payload, as: UTF8.self))
    }
}
