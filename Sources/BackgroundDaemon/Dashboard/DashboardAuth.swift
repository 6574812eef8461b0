import BackgroundModel
import Crypto
import Foundation
import Synchronization

/// Who may see the dashboard: whoever holds the token in the state directory
/// (`dashboard-token`, 0600, made on first start) as `Authorization: Bearer`, or the session
/// cookie a one-time login link sets. Links (`bgctl dashboard`) work once, within 10 minutes.
///
/// The cookie is not the token: it is a session that ends after 7 days, signed with the token
/// (HMAC-SHA256). A browser's cookie store leaks a week at most, and a new token (delete the
/// file, restart bgd) ends every session.
public final class DashboardAuth: Sendable {
    public let token: String
    private let codes = Mutex<[String: Date]>([:])
    static let cookieName = "bgd_dashboard"
    static let codeLifetime: TimeInterval = 600
    static let sessionLifetime: Duration = .seconds(7 * 86400)

    /// Reads the token file, or makes it.
    public init(stateDirectory: String) throws {
        let path = stateDirectory + "/dashboard-token"
        if let saved = try? String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(
            in: .whitespacesAndNewlines), saved.count >= 32
        {
            token = saved
        } else {
            token = Self.random()
            FileManager.default.createFile(
                atPath: path, contents: Data((token + "\n").utf8), attributes: [.posixPermissions: 0o600])
        }
    }

    static func random() -> String {
        base64URL(Data(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }))
    }

    static func base64URL(_ data: Data) -> String {
        data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The cookie's value for a session that starts `now`: when it ends, and its signature.
    func issueSession(now: Date) -> String {
        let end = Int64(now.adding(Self.sessionLifetime).timeIntervalSince1970.rounded(.up))
        return "\(end).\(signature(ofSessionEndingAt: end))"
    }

    private func signature(ofSessionEndingAt end: Int64) -> String {
        let code = HMAC<SHA256>.authenticationCode(
            for: Data("bgd dashboard session until \(end)".utf8), using: SymmetricKey(data: Data(token.utf8)))
        return Self.base64URL(Data(code))
    }

    /// Whether `value` is a session this token signed that has not ended by `now`.
    private func isSession(_ value: Substring, now: Date) -> Bool {
        let parts = value.split(separator: ".", maxSplits: 1)
        // Only the number as issued: no sign, no leading zeros, nothing a parser would forgive.
        guard parts.count == 2, let end = Int64(parts[0]), String(end) == parts[0],
            Double(end) > now.timeIntervalSince1970
        else { return false }
        return Self.equalInConstantTime(String(parts[1]), signature(ofSessionEndingAt: end))
    }

    /// A one-time login code, valid for 10 minutes from `now`.
    public func issueCode(now: Date) -> String {
        let code = Self.random()
        codes.withLock { codes in
            codes = codes.filter { $0.value > now }
            codes[code] = now.addingTimeInterval(Self.codeLifetime)
        }
        return code
    }

    /// Spends a login code; true once per code, before it expires.
    func redeem(_ code: String, now: Date) -> Bool {
        codes.withLock { $0.removeValue(forKey: code).map { $0 > now } ?? false }
    }

    /// Whether the request carries the token (`Authorization: Bearer`) or a session cookie
    /// that has not ended by `now`; compared in constant time.
    func allows(authorization: String?, cookie: String?, now: Date) -> Bool {
        if let presented = BearerToken.of(authorization), Self.equalInConstantTime(presented, token) {
            return true
        }
        for part in (cookie ?? "").split(separator: ";") {
            let pair = part.trimmingCharacters(in: .whitespaces)
            if pair.hasPrefix(Self.cookieName + "="), isSession(pair.dropFirst(Self.cookieName.count + 1), now: now) {
                return true
            }
        }
        return false
    }

    private static func equalInConstantTime(_ candidate: String, _ expected: String) -> Bool {
        let a = Array(candidate.utf8), b = Array(expected.utf8)
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }
}
