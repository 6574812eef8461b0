import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Checks that something listens on a Unix socket before a request is made. AsyncHTTPClient
/// retries a failing connection until the request's deadline, so without this, `bgctl status`
/// with bgd down would sit for the whole timeout instead of saying so at once.
enum SocketProbe {
    /// Nil when a connection succeeds within `timeout`; otherwise why it failed.
    static func problem(connectingTo path: String, timeout: Duration) -> Problem? {
        switch connection(to: path, timeout: timeout) {
        case .success(let descriptor):
            close(descriptor)
            return nil
        case .failure(let problem):
            return problem
        }
    }

    struct Problem: Error {
        var reason: String
        /// The socket, or a directory on its way, is not this user's to use: bgd may well be
        /// running, as another user.
        var permissionDenied = false
        /// bgd's queue of connections not yet accepted stayed full for the whole timeout: it
        /// runs, but takes no connection (stopped, or stuck).
        var timedOut = false
    }

    /// A connected socket (the caller closes it), or why there is none within `timeout`. The
    /// timeout is the socket's send timeout from before the connection: Linux waits that long
    /// for room in the queue of a bgd that accepts nothing. Without it, the wait had no end — a
    /// stopped bgd's queue, filled by earlier calls that gave up, hung every later one.
    static func connection(to path: String, timeout: Duration) -> Result<Int32, Problem> {
        #if canImport(Glibc)
            let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #else
            let descriptor = socket(AF_UNIX, SOCK_STREAM, 0)
        #endif
        guard descriptor >= 0 else { return .failure(Problem(reason: String(cString: strerror(errno)))) }
        guard var address = address(of: path) else {
            close(descriptor)
            return .failure(Problem(reason: "the socket path is too long"))
        }
        var limit = timeval(timeout)
        setsockopt(descriptor, SOL_SOCKET, SO_SNDTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result != 0 else { return .success(descriptor) }
        let code = errno
        close(descriptor)
        if code == EAGAIN || code == EWOULDBLOCK || code == EINPROGRESS {
            return .failure(
                Problem(
                    reason: "bgd took no connection within \(timeout.formatted(.units(allowed: [.seconds])))",
                    timedOut: true))
        }
        return .failure(Problem(reason: describe(code, at: path), permissionDenied: code == EACCES || code == EPERM))
    }

    /// The socket address of `path`; nil if it is too long for one.
    static func address(of path: String) -> sockaddr_un? {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        guard path.utf8.count < MemoryLayout.size(ofValue: address.sun_path) else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { buffer in
            buffer.copyBytes(from: path.utf8)
            buffer[path.utf8.count] = 0
        }
        return address
    }

    private static func describe(_ code: Int32, at path: String) -> String {
        let reason = String(cString: strerror(code))
        // Linux refuses a connection to a directory or a plain file as to a socket nobody serves:
        // say what is there instead, so `--socket` given the state directory is understood.
        var status = stat()
        if stat(path, &status) == 0, status.st_mode & S_IFMT != S_IFSOCK {
            return "\(status.st_mode & S_IFMT == S_IFDIR ? "it is a directory" : "it is a file"), not a socket"
        }
        return reason
    }
}
