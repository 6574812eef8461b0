import Crypto
import Foundation
import Synchronization

/// Who may see the dashboard: whoever holds the token in the state directory
/// (`dashboard-token`, 0600, made on first start) as `Authorization: Bearer`, or the session
/// cookie a one-time login link sets. Links (`bgctl dashboard`) work once, within 10 minutes.
public final class DashboardAuth: Sendable {
    public let token: String
    private let codes = Mutex<[String: Date]>([:])
    static let cookieName = "bgd_dashboard"
    static let codeLifetime: TimeInterval = 600

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
        Data(SymmetricKey(size: .bits256).withUnsafeBytes { Array($0) }).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(
                of: "=", with: "")
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

    /// Whether the request carries the token (header or cookie), compared in constant time.
    func allows(authorization: String?, cookie: String?) -> Bool {
        if let authorization, authorization.hasPrefix("Bearer "), matches(String(authorization.dropFirst(7))) {
            return true
        }
        for part in (cookie ?? "").split(separator: ";") {
            let pair = part.trimmingCharacters(in: .whitespaces)
            if pair.hasPrefix(Self.cookieName + "="), matches(String(pair.dropFirst(Self.cookieName.count + 1))) {
                return true
            }
        }
        return false
    }

    private func matches(_ candidate: String) -> Bool {
        let a = Array(candidate.utf8), b = Array(token.utf8)
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }
}
