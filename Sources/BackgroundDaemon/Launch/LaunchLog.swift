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
/// one before) at the next launch, as logrotate does. A process that lives on keeps the file it
/// was given; only launches start a new one.
public enum LaunchLog {
    /// 1 MiB: pages of an app's own messages, never an unbounded share of the disk.
    public static let limit: Int64 = 1 << 20

    /// A descriptor for appending to the log at `path` (close-on-exec; the caller closes it), or
    /// nil when nothing can be made there (a directory the app made in its place: its output
    /// then goes nowhere, and the launch goes on).
    public static func descriptor(at path: String, limit: Int64 = limit) -> Int32? {
        // Non-blocking only while opening: a FIFO without a reader fails at once (ENXIO).
        let existing = open(path, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC)
        if existing >= 0 {
            var status = stat()
            if fstat(existing, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG {
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

    private static func blocking(_ descriptor: Int32) -> Int32 {
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        return descriptor
    }
}
