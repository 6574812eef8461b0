import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The file a launched app's output goes to (`launch.log` in its container), opened by bgd before
/// the app is confined — so whatever the app left at that path last time must not lead anywhere
/// else. A link to a file outside the container would have the app's output appended there (a
/// shell's startup file, bgd's database: out of Landlock's reach by way of bgd), and a FIFO would
/// block the launch until something read it. Such a thing is removed and a file made anew.
///
/// And it stays bounded for months: past `limit` bytes it becomes `launch.log.1` (replacing the
/// one before) at the next launch, as logrotate does. A process that lives on — one long run, or
/// one suspended and resumed for weeks — keeps the file it was given, so bgd keeps that file's
/// descriptor too and trims it while the process lives (`keepWithin`).
public enum LaunchLog {
    /// 1 MiB: pages of an app's own messages, never an unbounded share of the disk.
    public static let limit: Int64 = 1 << 20

    /// How often bgd looks at the log of a process that is running (not frozen: a frozen one
    /// writes nothing). A minute: what an app can write in one is its own container's business,
    /// as every file it writes there is; it is a bound for months, not for a minute.
    public static let checkInterval = Duration.seconds(60)

    /// A descriptor for appending to the log at `path` (write-only, close-on-exec; the caller
    /// closes it), or
    /// nil when nothing can be made there (a directory the app made in its place: its output
    /// then goes nowhere, and the launch goes on).
    public static func descriptor(at path: String, limit: Int64 = limit) -> Int32? {
        // Non-blocking only while opening: a FIFO without a reader fails at once (ENXIO).
        let existing = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        if existing >= 0 {
            var status = stat()
            // One name only: a hard link the app made there is someone else's file, to which its
            // output would be appended (and which `keepWithin` would cut).
            if fstat(existing, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG, status.st_nlink == 1 {
                // Replaces what was at .1, whatever it was, following nothing; a directory the app
                // made there cannot be replaced, and the log goes on growing rather than vanish.
                if Int64(status.st_size) <= limit || rename(path, path + ".1") != 0 { return blocking(existing) }
                close(existing)
            } else {
                close(existing)
                unlink(path)
            }
        } else if errno != ENOENT {
            unlink(path)  // a link (ELOOP), a FIFO (ENXIO), a socket: the app's doing
        }
        // O_EXCL: made here and now, never something that appeared in between.
        let made = open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        return made >= 0 ? made : nil
    }

    /// Keeps the log a running process appends to within `limit`, as logrotate's `copytruncate`
    /// does: past it, its last `limit` bytes become `launch.log.1` (made anew, following
    /// nothing) and the log is emptied. The process writes with `O_APPEND`, so its next line
    /// starts the emptied file; what it writes between the copy and the truncation is lost.
    /// Emptied even when `.1` cannot be made (a directory the app put there): a running
    /// process's log is bounded before it is kept. Returns whether it trimmed.
    /// `reader` is the same file opened for reading (`reader(of:at:)`): the app's own descriptor
    /// is write-only.
    @discardableResult
    public static func keepWithin(_ limit: Int64 = limit, descriptor: Int32, reader: Int32, path: String) -> Bool {
        var status = stat()
        guard fstat(reader, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG, status.st_nlink == 1,
            Int64(status.st_size) > limit
        else { return false }
        let rotated = path + ".1"
        unlink(rotated)
        let copy = open(rotated, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        if copy >= 0 {
            defer { close(copy) }
            copyTail(of: reader, size: Int64(status.st_size), limit: limit, to: copy)
        }
        return ftruncate(descriptor, 0) == 0
    }

    /// The log `descriptor` writes to, opened again for reading (close-on-exec; the caller closes
    /// it); nil unless the name still leads to that very file, following no link.
    public static func reader(of descriptor: Int32, at path: String) -> Int32? {
        let reader = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        guard reader >= 0 else { return nil }
        var written = stat()
        var read = stat()
        guard fstat(descriptor, &written) == 0, fstat(reader, &read) == 0, written.st_dev == read.st_dev,
            written.st_ino == read.st_ino
        else {
            close(reader)
            return nil
        }
        return reader
    }

    private static func copyTail(of source: Int32, size: Int64, limit: Int64, to destination: Int32) {
        var offset = max(0, size - limit)
        var buffer = [UInt8](repeating: 0, count: 64 << 10)
        while offset < size {
            let read = buffer.withUnsafeMutableBytes {
                pread(source, $0.baseAddress, min($0.count, Int(size - offset)), off_t(offset))
            }
            guard read > 0 else { return }
            let written = buffer.withUnsafeBytes { write(destination, $0.baseAddress, read) }
            guard written == read else { return }
            offset += Int64(read)
        }
    }

    private static func blocking(_ descriptor: Int32) -> Int32 {
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        return descriptor
    }
}
