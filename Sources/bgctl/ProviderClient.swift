import AsyncHTTPClient
import BackgroundModel
import Crypto
import Foundation
import NIOCore
import NIOSSL

/// An ES256 provider token, as APNs client libraries make them.
enum ProviderJWT {
    static func make(keyID: String, teamID: String, key: P256.Signing.PrivateKey, issuedAt: Date) throws -> String {
        let header = base64URL(Data(#"{"alg":"ES256","kid":"\#(keyID)"}"#.utf8))
        let claims = base64URL(Data(#"{"iss":"\#(teamID)","iat":\#(Int(issuedAt.timeIntervalSince1970))}"#.utf8))
        let signature = try key.signature(for: Data("\(header).\(claims)".utf8)).rawRepresentation
        return "\(header).\(claims).\(base64URL(signature))"
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}

/// The gateway's answer to one push.
struct PushAnswer: Codable {
    var status: Int
    var reason: String?
    var apnsID: String?
    var httpVersion: String

    /// POSTs over HTTP/2 (TLS, ALPN), trusting `certificate`.
    static func post(url: String, headers: [(String, String)], body: Data, trusting certificate: String) async throws -> PushAnswer {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.additionalTrustRoots = [.file(certificate)]
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.httpVersion = .automatic
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        defer { _ = client.shutdown() }
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await client.execute(request, timeout: .seconds(10))
        let data = try await response.body.collect(upTo: 1 << 16)
        let json = (try? JSONSerialization.jsonObject(with: Data(data.readableBytesView))) as? [String: Any]
        return PushAnswer(
            status: Int(response.status.code), reason: json?["reason"] as? String, apnsID: response.headers.first(name: "apns-id"),
            httpVersion: "\(response.version)")
    }
}
