import BackgroundModel
import Foundation
import QuietThreads

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// bgd's state directory, held exclusively while bgd runs.
///
/// Layout: `bgd.sqlite` (+ WAL), `bgd.lock`, `containers/<app id>/` (one directory per app,
/// where its launch log and its own files live).
public final class StateDirectory: Sendable {
    public let path: String
    private let lock: PidLock

    public struct AlreadyInUse: Error, CustomStringConvertible {
        public var path: String
        public var holder: String?
        public var description: String {
            "another bgd\(holder.map { " (pid \($0))" } ?? "") is using the state directory \(path); "
                + "stop it first, or start this one with another --state-dir"
        }
    }

    public struct Unusable: Error, CustomStringConvertible {
        public var path: String
        public var reason: String
        /// The path says which: the state directory, the socket's directory or its lock.
        public var description: String { "cannot use \(path): \(reason)" }
    }

    /// Creates the directory (0700) if needed and takes its lock; throws `AlreadyInUse` when
    /// another bgd holds it, and `Unusable` when it is not bgd's user's: one another user made
    /// (a `--state-dir` in a shared place) could have its database swapped and its apps'
    /// containers replaced by links — before, bgd made it 0700 where it could and went on.
    public init(path: String) throws {
        self.path = path
        do {
            try FileManager.default.createDirectory(
                atPath: path, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw Unusable(path: path, reason: SystemErrorText.describe(error))
        }
        // Looked at before anything is made in it.
        var info = stat()
        guard stat(path, &info) == 0 else { throw Unusable(path: path, reason: String(cString: strerror(errno))) }
        guard info.st_uid == geteuid() else {
            throw Unusable(
                path: path,
                reason:
                    "the state directory belongs to user \(info.st_uid), not to bgd's (\(geteuid())): whoever owns it could change bgd's database. Pass a --state-dir of your own (under sudo, HOME or XDG_STATE_HOME may still be the user's)"
            )
        }
        // A file system that keeps no modes (vfat, some FUSE mounts) refuses chmod: what counts is
        // that nobody else may write there.
        if chmod(path, 0o700) != 0, stat(path, &info) == 0, info.st_mode & 0o022 != 0 {
            throw Unusable(
                path: path,
                reason: "others may write to it and it cannot be made 0700: \(String(cString: strerror(errno)))")
        }
        do {
            try FileManager.default.createDirectory(
                atPath: path + "/containers", withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw Unusable(path: path, reason: SystemErrorText.describe(error))
        }
        switch PidLock.take(path + "/bgd.lock") {
        case .taken(let lock): self.lock = lock
        case .held(let holder): throw AlreadyInUse(path: path, holder: holder)
        case .unusable(let reason): throw Unusable(path: path, reason: reason)
        }
    }

    public var databasePath: String { path + "/bgd.sqlite" }

    /// Lets the directory go once bgd has stopped serving, not when the last reference to it
    /// goes: a task still winding down held it, and the next bgd on the same directory (a test
    /// restarting one) was refused as a second bgd.
    func releaseLock() { lock.release() }

    /// Where bgd remembers the cgroups the user's processes came from (`AppCgroups`).
    public var cgroupOriginsPath: String { path + "/cgroup-origins" }

    /// Where the app's own directory is (it may not exist yet).
    public func containerPath(for app: AppID) -> String { DaemonLocation.containerPath(of: app, stateDirectory: path) }

    /// Where bgd keeps the files of the app's transfers (`containers/<app>/transfers`), or of the
    /// operator's uploads (nil: `transfers`); not made here.
    public func transfersPath(for app: AppID?) -> String {
        app.map { containerPath(for: $0) + "/transfers" } ?? path + "/transfers"
    }

    /// Every transfer directory there may be: the operator's and each container's.
    public func allTransfersPaths() -> [String] {
        let apps = (try? FileManager.default.contentsOfDirectory(atPath: path + "/containers")) ?? []
        return [transfersPath(for: nil)] + apps.compactMap { AppID(rawValue: $0) }.map { transfersPath(for: $0) }
    }

    /// The app's own directory, created (0700) on first use.
    public func container(for app: AppID) throws -> String {
        let directory = containerPath(for: app)
        try FileManager.default.createDirectory(
            atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        return directory
    }

    /// Removes the app's directory (it was unregistered, as an uninstall removes an app's data).
    public func removeContainer(for app: AppID) {
        try? FileManager.default.removeItem(atPath: containerPath(for: app))
    }
}

/// Another bgd holds the control socket's path.
public struct SocketInUse: Error, CustomStringConvertible {
    public var socketPath: String
    public var holder: String?
    public var description: String {
        "another bgd\(holder.map { " (pid \($0))" } ?? "") serves the socket \(socketPath); stop it first, or give this one another --socket"
    }
}

/// The control socket's path, held for bgd's life: a lock beside it (`<socket>.lock`) says
/// which bgd serves it, so a second bgd (another state directory, the same `--socket`) neither
/// binds over a live socket nor unlinks one it does not own (probe D7).
final class SocketClaim: Sendable {
    let socketPath: String
    private let lock: PidLock

    /// The socket file is systemd's (socket activation): never removed, at start or stop.
    let isActivated: Bool

    /// Makes the socket's directory (0700), takes the lock, and clears a stale socket file
    /// (one no live bgd holds) — unless systemd made the socket and passed it (`activated`).
    init(_ socketPath: String, activated: Bool = false) throws {
        guard socketPath.utf8.count < 104 else {
            throw StateDirectory.Unusable(
                path: socketPath, reason: "a Unix socket path must be shorter than 104 bytes; pass a shorter --socket")
        }
        let directory = (socketPath as NSString).deletingLastPathComponent
        var info = stat()
        if stat(directory, &info) == 0 {
            // A directory that was there keeps its mode: a --socket in $HOME (or /tmp, as root)
            // once made that directory 0700. One anybody may write to without the sticky bit
            // lets anybody replace the socket.
            if info.st_mode & 0o002 != 0 && info.st_mode & S_ISVTX == 0 {
                throw StateDirectory.Unusable(
                    path: directory,
                    reason:
                        "anybody may write to it and replace bgd's socket; pass a --socket in a directory only you can write (the default is $XDG_RUNTIME_DIR/bgd)"
                )
            }
        } else {
            do {
                try FileManager.default.createDirectory(
                    atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw StateDirectory.Unusable(path: directory, reason: SystemErrorText.describe(error))
            }
            chmod(directory, 0o700)  // whatever the umask
        }
        switch PidLock.take(socketPath + ".lock") {
        case .taken(let lock): self.lock = lock
        case .held(let holder): throw SocketInUse(socketPath: socketPath, holder: holder)
        case .unusable(let reason): throw StateDirectory.Unusable(path: socketPath + ".lock", reason: reason)
        }
        self.socketPath = socketPath
        isActivated = activated
        guard !activated else { return }
        // A socket left by a bgd that died (nobody holds its lock) goes; anything else at the path
        // is not bgd's to remove — a --socket mistyped as a file of the user's was deleted.
        var existing = stat()
        if lstat(socketPath, &existing) == 0 {
            guard (existing.st_mode & S_IFMT) == S_IFSOCK else {
                throw StateDirectory.Unusable(
                    path: socketPath, reason: "it is there and is not a socket; pass another --socket, or remove it")
            }
            unlink(socketPath)
        }
    }

    /// Removes the socket (ours: the lock is held; systemd's stays, for its next start) and lets
    /// the path go.
    func release() {
        if !isActivated { unlink(socketPath) }
        lock.release()
    }
}

/// An exclusive `flock` on a file that names the holder's pid, held until released or the
/// process ends: one bgd per state directory, one per socket.
final class PidLock: Sendable {
    private let descriptor: Int32

    enum Outcome {
        case taken(PidLock)
        /// Another process holds it; its pid, as it wrote it.
        case held(String?)
        case unusable(String)
    }

    private init(descriptor: Int32) { self.descriptor = descriptor }

    /// Takes the lock at `path`: a file of bgd's user's, never followed through a link — beside
    /// a socket in a shared directory (/tmp), another user's lock file could hold bgd off for
    /// good, and a link there made bgd truncate whatever it pointed at.
    static func take(_ path: String) -> Outcome {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0o600)
        guard descriptor >= 0 else {
            let reason = String(cString: strerror(errno))
            return .unusable(errno == ELOOP ? "the lock file is a symbolic link; remove it" : reason)
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_uid == geteuid() else {
            close(descriptor)
            return .unusable(
                "the lock file is not a file of bgd's user's (owner \(info.st_uid)); remove it, or choose another path")
        }
        guard flock(descriptor, LOCK_EX | LOCK_NB) == 0 else {
            let holder = try? String(contentsOfFile: path, encoding: .utf8).trimmingCharacters(
                in: .whitespacesAndNewlines)
            close(descriptor)
            return .held(holder?.isEmpty == false ? holder : nil)
        }
        ftruncate(descriptor, 0)
        let pid = "\(getpid())\n"
        _ = pid.withCString { write(descriptor, $0, strlen($0)) }
        return .taken(PidLock(descriptor: descriptor))
    }

    func release() { flock(descriptor, LOCK_UN) }

    deinit {
        flock(descriptor, LOCK_UN)
        close(descriptor)
    }
}
