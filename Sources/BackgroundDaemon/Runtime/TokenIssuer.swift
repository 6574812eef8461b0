import BackgroundModel
import Crypto
import Foundation
import Synchronization

/// Makes app tokens, hashes them for the store, and keeps the short-lived tokens of processes
/// bgd launched (which must authenticate without bgd ever storing an app's real token).
public final class TokenIssuer: Sendable {
    /// Who a token speaks for.
    public struct Bearer: Hashable, Sendable {
        public var app: AppID
        /// Set for a process bgd launched for a run: the run it was launched for.
        public var launchedForRun: RunID?
        /// The app as the user runs it, or the process bgd launched with this token.
        public var owner: StreamOwner

        public init(app: AppID, launchedForRun: RunID?, owner: StreamOwner) {
            self.app = app
            self.launchedForRun = launchedForRun
            self.owner = owner
        }

        public var isLaunched: Bool { owner.isLaunched }
    }

    private let launchTokens = Mutex<[String: Bearer]>([:])

    public init() {}

    /// 32 random bytes, base64url: 256 bits that no one guesses.
    public func makeToken() -> AppToken {
        var generator = SystemRandomNumberGenerator()
        let bytes = (0..<32).map { _ in UInt8.random(in: .min ... .max, using: &generator) }
        let text = Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
        return AppToken(rawValue: text)
    }

    public static func hash(_ token: AppToken) -> String {
        SHA256.hash(data: Data(token.rawValue.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// Issues a token valid until `revokeLaunchToken(_:)` (the process exits).
    public func issueLaunchToken(for app: AppID, run: RunID?) -> AppToken {
        let token = makeToken()
        launchTokens.withLock { $0[token.rawValue] = Bearer(app: app, launchedForRun: run, owner: .launched(token)) }
        return token
    }

    public func revokeLaunchToken(_ token: AppToken) {
        _ = launchTokens.withLock { $0.removeValue(forKey: token.rawValue) }
    }

    public func revokeLaunchTokens(of app: AppID) {
        launchTokens.withLock { tokens in tokens = tokens.filter { $0.value.app != app } }
    }

    public func launchBearer(for token: String) -> Bearer? { launchTokens.withLock { $0[token] } }
}
