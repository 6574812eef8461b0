import BackgroundModel
import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The operator's credential: a random token in a file beside the control socket
/// (`<socket>.operator-token`, 0600 in bgd's 0700 socket directory), made on first start and
/// kept, so `bgctl` — run by the user who runs bgd — proves it may use the operator endpoints,
/// and an app, holding only its own token, cannot (docs/security.md).
public struct OperatorCredential: Sendable {
    public let path: String
    private let digest: [UInt8]

    /// Reads the token beside `socketPath`, or makes one.
    public init(socketPath: String) throws {
        path = DaemonLocation.operatorTokenPath(socketPath: socketPath)
        var token =
            (try? String(contentsOfFile: path, encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) ?? ""
        if token.count < 32 {
            token = TokenIssuer().makeToken().rawValue
            let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard descriptor >= 0 else {
                throw StateDirectory.Unusable(
                    path: path, reason: "cannot write the operator token: \(String(cString: strerror(errno)))")
            }
            let line = token + "\n"
            let written = line.withCString { write(descriptor, $0, strlen($0)) }
            fsync(descriptor)
            close(descriptor)
            guard written == line.utf8.count else {
                throw StateDirectory.Unusable(path: path, reason: "cannot write the operator token")
            }
        }
        chmod(path, 0o600)
        digest = Array(SHA256.hash(data: Data(token.utf8)))
    }

    /// Whether `presented` is the operator token (compared by digest, so the time taken says
    /// nothing about how much of it was right).
    public func accepts(_ presented: String) -> Bool {
        Array(SHA256.hash(data: Data(presented.utf8))) == digest
    }
}
