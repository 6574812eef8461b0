import BackgroundModel
import BackgroundStore
import BackgroundTransfers
import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The app's token in its container (`app-token`, 0600), which `BackgroundApplication(appID:)`
/// reads, kept in step with the hash the store holds across a crash. It is written in two steps
/// around the store's commit: `stage` writes and syncs `app-token.new` before it, `install`
/// renames that over `app-token` and syncs the directory after it. A bgd killed in between finds
/// the staged file at its next start and installs it if it is the token the store has, or
/// removes it (`settleStaged`). Before, the file was written after the commit: a crash there
/// left a rotated app holding a token the store no longer knew, refused until the operator
/// rotated again.
enum TokenFile {
    /// A staged token is `app-token.new.<uuid>`: a name of its own per call, so two at once (a
    /// rotation racing another) never take each other's.
    static let stagedInfix = ".new."

    /// Writes `token` beside the app's token file, synced, under a name of its own; returns its
    /// path. Made with `O_EXCL|O_NOFOLLOW`: nothing the app left there is followed.
    static func stage(_ token: String, of app: AppID, in stateDirectory: StateDirectory) throws -> String {
        _ = try stateDirectory.container(for: app)
        let staged =
            DaemonLocation.appTokenPath(of: app, stateDirectory: stateDirectory.path) + stagedInfix + UUID().uuidString
        let descriptor = open(staged, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw ServiceError.tokenUnavailable(app) }
        defer { close(descriptor) }
        let line = Array((token + "\n").utf8)
        guard write(descriptor, line, line.count) == line.count, fsync(descriptor) == 0 else {
            unlink(staged)
            throw ServiceError.tokenUnavailable(app)
        }
        return staged
    }

    /// Puts a staged token in place (the store holds its hash now). Throws when the rename
    /// fails, or its directory's sync does: the token may then not survive a crash (the app
    /// would find the file gone, or its old token, and `bgctl token APP --rotate` makes anew).
    static func install(_ staged: String) throws {
        guard let infix = staged.range(of: stagedInfix, options: .backwards) else { throw CocoaError(.fileNoSuchFile) }
        let path = String(staged[..<infix.lowerBound])
        guard rename(staged, path) == 0 else { throw CocoaError(.fileWriteUnknown) }
        try SafeFiles.syncDirectory(of: path)
    }

    /// At start: installs each staged token the store holds the hash of (a bgd killed between the
    /// commit and the rename), removes any other. Returns how many it installed. What a container
    /// holds never stops bgd from starting: a token that cannot be put in place (the app made
    /// `app-token` a directory) is logged and dropped.
    static func settleStaged(store: BackgroundStore, stateDirectory: StateDirectory, logger: Logger) async throws -> Int {
        var installed = 0
        let containers = stateDirectory.path + "/containers"
        for name in (try? FileManager.default.contentsOfDirectory(atPath: containers)) ?? [] {
            guard let app = AppID(rawValue: name) else { continue }
            let path = DaemonLocation.appTokenPath(of: app, stateDirectory: stateDirectory.path)
            let prefix = (path as NSString).lastPathComponent + stagedInfix
            let inside = (path as NSString).deletingLastPathComponent
            for file in (try? FileManager.default.contentsOfDirectory(atPath: inside)) ?? [] where file.hasPrefix(prefix) {
                let staged = inside + "/" + file
                guard let token = readStaged(staged) else { continue }
                guard try await store.app(forTokenHash: TokenIssuer.hash(AppToken(rawValue: token))) == app else {
                    unlink(staged)
                    continue
                }
                do {
                    try install(staged)
                    installed += 1
                    logger.notice(
                        "Put in place the app's token a stopped bgd had committed", metadata: ["app.id": "\(app)"])
                } catch {
                    unlink(staged)
                    logger.warning(
                        "Cannot put the app's token in place; bgctl token APP --rotate makes a new one",
                        metadata: ["app.id": "\(app)", "path": "\(path)"])
                }
            }
        }
        return installed
    }

    /// A staged token's text; nil when there is none, or something other than a plain file (a link
    /// is not followed), which is then removed.
    private static func readStaged(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard descriptor >= 0 else {
            if errno != ENOENT { unlink(path) }
            return nil
        }
        defer { close(descriptor) }
        var info = stat()
        var buffer = [UInt8](repeating: 0, count: 256)
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            unlink(path)
            return nil
        }
        let count = read(descriptor, &buffer, buffer.count)
        guard count > 0 else {
            unlink(path)
            return nil
        }
        return String(decoding: buffer[..<count], as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
