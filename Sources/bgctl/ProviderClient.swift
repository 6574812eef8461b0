import AsyncHTTPClient
import BackgroundModel
import Crypto
import Foundation
import NIOCore
import NIOSSL

/// An ES256 provider token, as APNs client libraries make them.
enum ProviderJWT {
    /// A token minted less than 40 minutes ago for the same key and team is reused, as APNs asks
    /// ("no more than once every 20 minutes"): minting one per send would earn 429
    /// TooManyProviderTokenUpdates. Kept in `$XDG_CACHE_HOME/bgctl` (else `~/.cache/bgctl`), one
    /// file per key id and key — a new .p8 under an old key id must not reuse the old key's token.
    static func cached(keyID: String, teamID: String, key: P256.Signing.PrivateKey, now: Date) throws -> String {
        let environment = ProcessInfo.processInfo.environment
        let base = environment["XDG_CACHE_HOME"] ?? (NSHomeDirectory() + "/.cache")
        let directory = base + "/bgctl"
        let fingerprint = SHA256.hash(data: key.publicKey.rawRepresentation).prefix(8).map {
            String(format: "%02x", $0)
        }.joined()
        let file = directory + "/provider-token-\(keyID)-\(fingerprint)"
        if let saved = try? String(contentsOfFile: file, encoding: .utf8) {
            let fields = saved.split(separator: " ").map(String.init)
            if fields.count == 3, fields[0] == teamID, let iat = Double(fields[1]),
                now.timeIntervalSince1970 - iat < 40 * 60,
                now.timeIntervalSince1970 >= iat
            {
                return fields[2]
            }
        }
        let token = try make(keyID: keyID, teamID: teamID, key: key, issuedAt: now)
        try? FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        FileManager.default.createFile(
            atPath: file, contents: Data("\(teamID) \(Int(now.timeIntervalSince1970)) \(token)".utf8),
            attributes: [.posixPermissions: 0o600])
        return token
    }

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
    static func post(
        url: String, headers: [(String, String)], body: Data, trusting certificate: String, timeout: Duration
    ) async throws -> PushAnswer {
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
        let (seconds, attoseconds) = timeout.components
        let response = try await client.execute(
            request, timeout: .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000))
        let data = try await response.body.collect(upTo: 1 << 16)
        let json = (try? JSONSerialization.jsonObject(with: Data(data.readableBytesView))) as? [String: Any]
        return PushAnswer(
            status: Int(response.status.code), reason: json?["reason"] as? String,
            apnsID: response.headers.first(name: "apns-id"),
            httpVersion: "\(response.version)")
    }
}
