import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// The listening socket systemd hands bgd when `bgd.socket` activates it (sd_listen_fds(3)):
/// `LISTEN_PID` names this process, `LISTEN_FDS` counts descriptors from 3. bgd serves its API on
/// that socket instead of binding one, so `bgctl` and apps that connect start it on demand and
/// nothing is lost while it starts or restarts: connections wait in the socket's backlog.
public struct ActivatedSocket: Sendable, Equatable {
    public var descriptor: Int32
    /// Where the socket is bound (from `getsockname`): what bgd reports as its socket.
    public var path: String

    public struct Refusal: Error, CustomStringConvertible, Equatable {
        public var description: String
    }

    /// The socket passed to this process, or nil when none was (`LISTEN_PID` absent or another
    /// process's). The variables are removed either way, as `sd_listen_fds(1)` does, so that apps
    /// bgd launches do not take the socket for theirs; the descriptor is made close-on-exec.
    /// Throws when the passed descriptors are not one listening Unix stream socket.
    public static func take(unsetEnvironment: Bool = true) throws(Refusal) -> ActivatedSocket? {
        let environment = ProcessInfo.processInfo.environment
        defer {
            if unsetEnvironment {
                for name in ["LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"] { unsetenv(name) }
            }
        }
        guard let pid = environment["LISTEN_PID"].flatMap(Int32.init), pid == getpid() else { return nil }
        guard let count = environment["LISTEN_FDS"].flatMap(Int.init), count >= 1 else { return nil }
        guard count == 1 else {
            throw Refusal(
                description:
                    "systemd passed \(count) sockets; bgd serves one (a ListenStream= Unix socket in bgd.socket)")
        }
        let descriptor: Int32 = 3  // SD_LISTEN_FDS_START
        return try inspect(descriptor)
    }

    /// Checks that `descriptor` is a listening Unix stream socket bound to a path, and marks it
    /// close-on-exec.
    static func inspect(_ descriptor: Int32) throws(Refusal) -> ActivatedSocket {
        func option(_ name: Int32) -> Int32? {
            var value: Int32 = 0
            var length = socklen_t(MemoryLayout<Int32>.size)
            return getsockopt(descriptor, SOL_SOCKET, name, &value, &length) == 0 ? value : nil
        }
        guard let type = option(SO_TYPE), let domain = option(SO_DOMAIN) else {
            throw Refusal(description: "descriptor \(descriptor) from systemd is not a socket")
        }
        guard domain == AF_UNIX, type == Int32(SOCK_STREAM.rawValue), option(SO_ACCEPTCONN) == 1 else {
            throw Refusal(
                description:
                    "the socket systemd passed is not a listening Unix stream socket; bgd.socket needs ListenStream=/path/to/bgd.sock"
            )
        }
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        let path = withUnsafeBytes(of: address.sun_path) { bytes in
            String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
        guard named == 0, path.hasPrefix("/") else {
            throw Refusal(description: "the socket systemd passed has no path (an abstract socket?); bgd needs a file")
        }
        _ = fcntl(descriptor, F_SETFD, FD_CLOEXEC)
        return ActivatedSocket(descriptor: descriptor, path: path)
    }
}
