import BackgroundModel
import Crypto
import Foundation
import Hummingbird

/// Device tokens (an app's own, under `/v1/app`) and provider keys and push history (the
/// operator's). The push gateway itself listens elsewhere (HTTP/2, the APNs provider API).
struct PushRoutes {
    let pushes: Pushes

    func add(to router: Router<APIRequestContext>, appGroup: RouterGroup<APIRequestContext>) {
        appGroup.post("push/token") { _, context in
            try JSONResponse.make(try await pushes.deviceToken(for: try context.appCaller().app))
        }
        appGroup.delete("push/token") { _, context in
            try await pushes.revokeDeviceTokens(of: try context.appCaller().app)
            return Response(status: .noContent)
        }
        router.get("v1/apps/:id/push/token") { _, context in
            try JSONResponse.make(try await pushes.existingDeviceToken(of: try context.appID()))
        }
        router.post("v1/apps/:id/push/token") { _, context in
            try JSONResponse.make(try await pushes.deviceToken(for: try context.appID()))
        }
        router.get("v1/apps/:id/pushes") { request, context in
            let limit = try request.uri.integerQuery("limit", default: 50, range: 1...1000)
            return try JSONResponse.make(try await pushes.pushes(of: try context.appID(), limit: limit))
        }
        router.get("v1/push/keys") { _, _ in try JSONResponse.make(try await pushes.providerKeys()) }
        router.post("v1/push/keys") { request, _ in
            var request = request
            let key = try await request.decodeJSON(ProviderKeyRegistration.self)
            if let problem = key.problem { throw APIError(.badRequest, .invalidProviderKey, problem) }
            guard let publicKey = try? P256.Signing.PublicKey(pemRepresentation: key.publicKeyPEM) else {
                throw APIError(
                    .badRequest, .invalidProviderKey,
                    "'publicKeyPEM' is not a P-256 public key in PEM (bgctl push keys add derives it from the .p8)")
            }
            return try JSONResponse.make(
                try await pushes.addProviderKey(key, publicKey: publicKey), status: .created)
        }
        router.get("v1/push/relay") { _, _ in try JSONResponse.make(await pushes.uplink.currentStatus()) }
        router.post("v1/push/relay") { request, _ in
            var request = request
            let enroll = try await request.decodeJSON(PushRelayEnrollRequest.self)
            // A relative path would be bgd's working directory's, not the caller's (bgctl sends a full one).
            if let certificate = enroll.certificate, !certificate.hasPrefix("/") {
                throw APIError(.badRequest, .invalidRelayURL, "give the certificate's full path, not \(certificate)")
            }
            if let certificate = enroll.certificate, !FileManager.default.isReadableFile(atPath: certificate) {
                throw APIError(.badRequest, .invalidRelayURL, "bgd cannot read the certificate \(certificate)")
            }
            do {
                // A second enrollment is a new device, and the relay keeps the apps' tokens for
                // the first: every push to them would wait there. Only when asked for.
                return try JSONResponse.make(
                    try await pushes.uplink.enroll(
                        url: enroll.url, certificate: enroll.certificate, enrollmentToken: enroll.enrollmentToken,
                        replace: enroll.replace == true),
                    status: .created)
            } catch PushUplink.Failure.alreadyEnrolled(let url, let device) {
                throw APIError(
                    .conflict, .relayAlreadyEnrolled,
                    "bgd is enrolled with \(url) as device \(device) already; enrolling again makes a new device, and the relay keeps the apps' device tokens for the old one (pushes to them would wait there): add --replace to enroll anew, then have each app register for a new token"
                )
            } catch PushUplink.Failure.badURL(let url) {
                throw APIError(
                    .badRequest, .invalidRelayURL, "'\(url)' is not a relay's uplink URL (https://host:2198)")
            } catch let error as PushUplink.Failure {
                throw APIError(.badGateway, .relayUnreachable, "the relay refused to enroll bgd: \(error)")
            } catch {
                throw APIError(.badGateway, .relayUnreachable, "cannot reach the relay at \(enroll.url): \(error)")
            }
        }
        router.delete("v1/push/keys/:kid") { _, context in
            try await pushes.removeProviderKey(context.parameters.get("kid") ?? "")
            return Response(status: .noContent)
        }
    }
}
