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
    /// file per key id, team id and key — a new .p8 under an old key id must not reuse the old
    /// key's token, and a send with a mistyped team id must not replace the good team's token
    /// (the next correct send would mint another within 20 minutes, and be refused for it).
    static func cached(keyID: String, teamID: String, key: P256.Signing.PrivateKey, now: Date) throws -> String {
        let directory = cacheDirectory
        let file = cacheFile(keyID: keyID, teamID: teamID, key: key)
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

    /// Drops the cached token for this key and team: the gateway refused it (a token it will not
    /// take must not be offered again for 40 minutes).
    static func forget(keyID: String, teamID: String, key: P256.Signing.PrivateKey) {
        try? FileManager.default.removeItem(atPath: cacheFile(keyID: keyID, teamID: teamID, key: key))
    }

    /// Whether a gateway refused the token for what it is (too old, or one too many): made anew
    /// next time. Not InvalidProviderToken: the cache is shared by every gateway, and a relay
    /// that does not know the key must not cost bgd's gateway the token it accepted (a new one
    /// would be 429 there for 20 minutes); a mistyped team has its own file anyway.
    static func refusesTheToken(_ reason: String?) -> Bool {
        guard let reason = reason.flatMap(APNsReason.init(rawValue:)) else { return false }
        return [.expiredProviderToken, .tooManyProviderTokenUpdates].contains(reason)
    }

    private static var cacheDirectory: String {
        (ProcessInfo.processInfo.environment["XDG_CACHE_HOME"] ?? (NSHomeDirectory() + "/.cache")) + "/bgctl"
    }

    private static func cacheFile(keyID: String, teamID: String, key: P256.Signing.PrivateKey) -> String {
        let fingerprint = SHA256.hash(data: key.publicKey.rawRepresentation).prefix(8).map {
            String(format: "%02x", $0)
        }.joined()
        // `push send` and `push jwt` check the ids (10 letters or digits); the filter keeps a
        // path separator out whatever comes.
        let safe = { (text: String) in text.filter { $0.isLetter || $0.isNumber } }
        return cacheDirectory + "/provider-token-\(safe(keyID))-\(safe(teamID))-\(fingerprint)"
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

    /// The answer from its status, headers' apns-id and body (APNs' `{"reason": …}` on a refusal).
    init(status: Int, body: ByteBuffer, apnsID: String?, httpVersion: String) {
        let json = (try? JSONSerialization.jsonObject(with: Data(body.readableBytesView))) as? [String: Any]
        self.init(status: status, reason: json?["reason"] as? String, apnsID: apnsID, httpVersion: httpVersion)
    }

    init(status: Int, reason: String?, apnsID: String?, httpVersion: String) {
        self.status = status
        self.reason = reason
        self.apnsID = apnsID
        self.httpVersion = httpVersion
    }

    /// POSTs over HTTP/2 (TLS, ALPN), trusting `certificate` (nil: the system's roots only; an
    /// http:// gateway needs none). To an http:// gateway, HTTP/2 with prior knowledge first
    /// (`bgd --push-plaintext`), then HTTP/1.1 if the gateway answers as an HTTP/1.1 server
    /// (`bgd --push-http1`), as nothing was delivered then.
    static func post(
        url: String, headers: [(String, String)], body: Data, trusting certificate: String?, timeout: Duration
    ) async throws -> PushAnswer {
        if url.hasPrefix("http://"), let parsed = URL(string: url) {
            do {
                return try await PriorKnowledgePost.post(url: parsed, headers: headers, body: body, timeout: timeout)
            } catch is PriorKnowledgePost.NotHTTP2 {}
        }
        var tls = TLSConfiguration.makeClientConfiguration()
        if let certificate { tls.additionalTrustRoots = [.file(certificate)] }
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.httpVersion = .automatic
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        defer { _ = client.shutdown() }
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(bytes: body))
        let response = try await client.execute(request, timeout: TimeAmount(timeout))
        return PushAnswer(
            status: Int(response.status.code), body: try await response.body.collect(upTo: 1 << 16),
            apnsID: response.headers.first(name: "apns-id"), httpVersion: "\(response.version)")
    }
}

extension TimeAmount {
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}
