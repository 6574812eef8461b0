import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// File operations that cannot be steered outside the place they were meant for: no following
/// links, no `..`, no silent replacement (probes S1, D6; reliability-matrix P17).
public enum SafeFiles {
    public struct Refusal: Error, CustomStringConvertible, Equatable {
        /// Which refusal; the API answers with the same name (`APIErrorCode`).
        public enum Code: String, Sendable, CaseIterable {
            case outsideContainer, invalidPath, linkRefused, notRegularFile, unreadable, fileError
            case destinationExists, destinationInvalid, destinationDirectoryMissing, destinationProtected
            case uploadFileProtected, uploadFileUnreadable
        }
        public var code: Code
        public var description: String
        /// The system's error (`errno`) when a call on the file system failed: a full disk is
        /// not the request's fault, and the API says so (507 or 503, not 400).
        public var systemError: Int32?
        public init(_ code: Code, _ description: String, systemError: Int32? = nil) {
            self.code = code
            self.description = description
            self.systemError = systemError
        }

        /// `fileError` for the call on the file system that just failed: "`what`: <strerror>",
        /// with its errno.
        static func systemFailure(_ what: String) -> Refusal {
            let error = errno
            return Refusal(.fileError, "\(what): \(String(cString: strerror(error)))", systemError: error)
        }
    }

    /// Opens for reading the regular file at `path`, which must lie beneath `root`: each
    /// component is opened relative to the one before with `O_NOFOLLOW`, so neither a `..` nor
    /// a symbolic link anywhere on the way leads out. Returns the descriptor (the caller closes it).
    public static func openBeneath(_ root: String, path: String) throws(Refusal) -> Int32 {
        let prefix = root.hasSuffix("/") ? root : root + "/"
        guard path.hasPrefix(prefix) else { throw Refusal(.outsideContainer, "\(path) is not inside \(root)") }
        let components = path.dropFirst(prefix.count).split(separator: "/", omittingEmptySubsequences: false).map(
            String.init)
        guard !components.isEmpty, components.allSatisfy({ !$0.isEmpty && $0 != "." && $0 != ".." }) else {
            throw Refusal(.invalidPath, "\(path) must name a file by plain names under \(root): no '.', '..' or '//'")
        }
        var directory = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directory >= 0 else {
            throw Refusal(.unreadable, "cannot open \(root): \(String(cString: strerror(errno)))")
        }
        for component in components.dropLast() {
            let next = openat(directory, component, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
            let code = errno
            close(directory)
            guard next >= 0 else {
                throw Refusal(
                    code == ELOOP || code == ENOTDIR ? .linkRefused : .unreadable,
                    "cannot open \(component) in \(path): "
                        + (code == ELOOP || code == ENOTDIR
                            ? "not a directory (links are not followed)" : String(cString: strerror(code))))
            }
            directory = next
        }
        let file = openat(directory, components.last!, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        let code = errno
        close(directory)
        guard file >= 0 else {
            throw Refusal(
                code == ELOOP ? .linkRefused : .unreadable,
                "cannot open \(path): "
                    + (code == ELOOP ? "it is a symbolic link, which is not followed" : String(cString: strerror(code)))
            )
        }
        var info = stat()
        guard fstat(file, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            close(file)
            throw Refusal(.notRegularFile, "\(path) is not a regular file")
        }
        return file
    }

    /// Sets `path` to `mode`.
    public static func giveMode(_ mode: mode_t, to path: String) throws(Refusal) {
        guard chmod(path, mode) == 0 else {
            throw Refusal.systemFailure("cannot set the mode of \(path)")
        }
    }

    /// This process's umask, read from /proc: `umask(2)` can only be read by setting it, which
    /// races with every other thread making files.
    public static func currentUmask() -> mode_t {
        if let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("Umask:") }),
            let value = mode_t(line.dropFirst("Umask:".count).trimmingCharacters(in: .whitespaces), radix: 8)
        {
            return value
        }
        return 0o022
    }

    /// The directory `path` is in, opened without following a link in that directory's own
    /// name; -1 with `errno` set if it cannot be. An app may write its container, and a
    /// `transfers` there that it made a link would otherwise take bgd's writes into a directory
    /// of its choosing — one the app itself may not write. The directories above are bgd's (the
    /// container is made by bgd in its own state) or the operator's, resolved when the transfer
    /// was made.
    public static func openDirectory(of path: String) -> Int32 {
        let directory = (path as NSString).deletingLastPathComponent
        let above = (directory as NSString).deletingLastPathComponent
        let top = open(above.isEmpty ? "/" : above, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard top >= 0 else { return -1 }
        let name = (directory as NSString).lastPathComponent
        let descriptor = openat(top, name.isEmpty ? "." : name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        let code = errno
        close(top)
        errno = code
        return descriptor
    }

    /// Opens `path` for writing, created 0600 if missing, following a link neither in its own
    /// name nor in its directory's (`openDirectory(of:)`); -1 with `errno` set if it cannot be.
    /// Anything but a plain file there (a FIFO, a device) is refused (`ENXIO` or `EINVAL`), at once.
    /// A file already there with a second name is refused (`EMLINK`) before anything is cut or
    /// written: bgd's files have one, so a hard link there is someone else's file.
    public static func openForWriting(_ path: String, truncating: Bool = false) -> Int32 {
        let directory = openDirectory(of: path)
        guard directory >= 0 else { return -1 }
        // Non-blocking while opening: a FIFO the app put at the name (a transfer's id is easy to
        // guess) would otherwise hold bgd's thread until something read it.
        let descriptor = openat(
            directory, (path as NSString).lastPathComponent,
            O_WRONLY | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0o600)
        let code = errno
        close(directory)
        guard descriptor >= 0 else {
            errno = code
            return -1
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0, info.st_mode & S_IFMT == S_IFREG, info.st_nlink == 1,
            !truncating || ftruncate(descriptor, 0) == 0
        else {
            let code = info.st_nlink > 1 ? EMLINK : info.st_mode & S_IFMT != S_IFREG ? EINVAL : errno
            close(descriptor)
            errno = code
            return -1
        }
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        return descriptor
    }

    /// Opens for reading a file bgd made at `path` (an upload's copy, a partial download),
    /// following a link neither in its own name nor in its directory's, and refusing one with a
    /// second name: bgd's files have one, so a hard link there is someone else's file. Returns
    /// the descriptor (the caller closes it) and the size. An app may write its container,
    /// where its transfer files are; without this, a link it put in place of its upload's copy
    /// would have bgd send the app's server a file the app may not read (`~/.ssh/id_ed25519`).
    public static func openForReading(_ path: String) throws(Refusal) -> (descriptor: Int32, size: Int64) {
        let directory = openDirectory(of: path)
        guard directory >= 0 else { throw refusal(errno, opening: path) }
        let file = openat(
            directory, (path as NSString).lastPathComponent, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        let code = errno
        close(directory)
        guard file >= 0 else { throw refusal(code, opening: path) }
        var info = stat()
        guard fstat(file, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG, info.st_nlink == 1 else {
            close(file)
            throw Refusal(
                .notRegularFile, "\(path) is not the file bgd made: not a regular file, or it has another name")
        }
        return (file, Int64(info.st_size))
    }

    private static func refusal(_ code: Int32, opening path: String) -> Refusal {
        switch code {
        case ENOENT: Refusal(.unreadable, "\(path) does not exist")
        case ELOOP, ENOTDIR: Refusal(.linkRefused, "\(path) or its directory is a link, which is not followed")
        default: Refusal(.unreadable, "cannot open \(path): \(String(cString: strerror(code)))")
        }
    }

    /// The size of an open file now (an upload's, which is copied up to it).
    public static func size(ofOpen descriptor: Int32) throws(Refusal) -> Int64 {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            throw Refusal(.unreadable, "cannot read the file's size", systemError: errno)
        }
        return Int64(info.st_size)
    }

    /// The size of the regular file at `path`, or nil when there is none: a link (in its name
    /// or its directory's) is not followed, so it is none.
    public static func size(of path: String) -> Int64? {
        let directory = openDirectory(of: path)
        guard directory >= 0 else { return nil }
        defer { close(directory) }
        var info = stat()
        guard fstatat(directory, (path as NSString).lastPathComponent, &info, AT_SYMLINK_NOFOLLOW) == 0,
            (info.st_mode & S_IFMT) == S_IFREG
        else { return nil }
        return Int64(info.st_size)
    }

    /// Removes the file (or link: not what it points to) at `path`, never a directory, and not
    /// through a link in its directory's name; whether something was removed.
    @discardableResult
    public static func remove(_ path: String) -> Bool {
        let directory = openDirectory(of: path)
        guard directory >= 0 else { return false }
        defer { close(directory) }
        return unlinkat(directory, (path as NSString).lastPathComponent, 0) == 0
    }

    /// Copies what `source` reads to a new file at `destination` (0600), synced.
    /// Copies at most `limit` bytes: the size the file had when the upload was made (and, with
    /// a quota, reserved). A file its app keeps writing to meanwhile is not copied without end.
    public static func copy(from source: Int32, to destination: String, limit: Int64 = .max) throws(Refusal) {
        let output = openForWriting(destination, truncating: true)
        guard output >= 0 else {
            throw Refusal.systemFailure("cannot write \(destination)")
        }
        defer { close(output) }
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        var left = limit
        while left > 0 {
            let count = read(source, &buffer, Int(min(Int64(buffer.count), left)))
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw Refusal(.unreadable, "reading the upload failed: \(String(cString: strerror(errno)))")
            }
            if count == 0 { break }
            left -= Int64(count)
            var done = 0
            while done < count {
                let written = buffer.withUnsafeBytes { write(output, $0.baseAddress! + done, count - done) }
                if written < 0 && errno == EINTR { continue }
                guard written > 0 else {
                    throw Refusal.systemFailure("writing \(destination) failed")
                }
                done += written
            }
        }
        guard fsync(output) == 0 else {
            throw Refusal.systemFailure("syncing \(destination) failed")
        }
    }

    /// Makes a rename durable by syncing the directory that holds the file. A failed sync is
    /// thrown, never retried and trusted (fsyncgate, reliability-matrix D4): the name may not
    /// survive a crash, so the caller must not report it done.
    public static func syncDirectory(of path: String) throws(Refusal) {
        let directory = (path as NSString).deletingLastPathComponent
        let descriptor = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard descriptor >= 0 else {
            throw Refusal.systemFailure("cannot open \(directory) to sync it")
        }
        defer { close(descriptor) }
        guard fsync(descriptor) == 0 else {
            throw Refusal.systemFailure("syncing \(directory) failed")
        }
    }

    /// Moves a finished file into place. With `replacing` false the move never overwrites:
    /// `link` fails if anything — a file, a link someone planted — is at `destination`. A crash
    /// between the link and the unlink leaves both names on one file, which a second call
    /// recognises and finishes. Neither name's directory is followed if it is a link
    /// (`openDirectory(of:)`).
    public static func moveIntoPlace(_ source: String, to destination: String, replacing: Bool) throws(Refusal) {
        let (from, to) = (openDirectory(of: source), openDirectory(of: destination))
        defer {
            if from >= 0 { close(from) }
            if to >= 0 { close(to) }
        }
        guard from >= 0, to >= 0 else {
            throw Refusal.systemFailure("cannot move into \(destination)")
        }
        let (sourceName, destinationName) = (
            (source as NSString).lastPathComponent, (destination as NSString).lastPathComponent
        )
        if replacing {
            guard renameat(from, sourceName, to, destinationName) == 0 else {
                throw Refusal.systemFailure("cannot move into \(destination)")
            }
            return
        }
        if linkat(from, sourceName, to, destinationName, 0) != 0 {
            let code = errno
            guard code == EEXIST, sameFile(source, destination) else {
                throw Refusal(
                    code == EEXIST ? .destinationExists : .fileError,
                    code == EEXIST
                        ? "something is already at \(destination); bgd does not replace it"
                        : "cannot move into \(destination): \(String(cString: strerror(code)))")
            }
        }
        unlinkat(from, sourceName, 0)
    }

    /// Whether two paths name the same file (device and inode), without following links.
    public static func sameFile(_ first: String, _ second: String) -> Bool {
        var a = stat()
        var b = stat()
        return lstat(first, &a) == 0 && lstat(second, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino
    }
}
