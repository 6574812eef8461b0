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

    /// Reads the token beside `socketPath`, or makes one. A token file another user owns is
    /// refused (they may know the token: with a `--socket` in a shared directory, they could
    /// have made it first); one others could read is replaced by a new token.
    public init(socketPath: String) throws {
        path = DaemonLocation.operatorTokenPath(socketPath: socketPath)
        var token = try Self.kept(at: path) ?? ""
        if token.count < 32 {
            token = TokenIssuer().makeToken().rawValue
            // A new file, not the old one rewritten: whoever opened that one while others could
            // read it would read the new token through the descriptor they hold.
            unlink(path)
            let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
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
        digest = Array(SHA256.hash(data: Data(token.utf8)))
    }

    /// The token in the file at `path`, if there is one bgd may trust: bgd's user's, readable by
    /// nobody else. Nil when there is none, or when others could have read it (a new one is made).
    private static func kept(at path: String) throws -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)  // a FIFO would block
        defer { if descriptor >= 0 { close(descriptor) } }
        var info = stat()
        // One bgd cannot even open (another user's, 0600) is still another user's.
        guard (descriptor >= 0 ? fstat(descriptor, &info) : lstat(path, &info)) == 0 else { return nil }
        guard info.st_uid == geteuid() else {
            throw StateDirectory.Unusable(
                path: path,
                reason:
                    "the operator token file belongs to user \(info.st_uid), not to bgd's: whoever made it may know the token. Remove it, or pass a --socket in a directory only you can write"
            )
        }
        guard descriptor >= 0, info.st_mode & 0o077 == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: false)
        let data = (try? handle.read(upToCount: 4096)) ?? Data()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Whether `presented` is the operator token (compared by digest, so the time taken says
    /// nothing about how much of it was right).
    public func accepts(_ presented: String) -> Bool {
        Array(SHA256.hash(data: Data(presented.utf8))) == digest
    }
}
