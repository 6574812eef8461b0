import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// sd_notify(3) without libsystemd: a datagram to `$NOTIFY_SOCKET` when systemd runs bgd as a
/// `Type=notify` service, so `systemctl --user start bgd` returns once the socket accepts
/// connections. Does nothing elsewhere.
enum SystemdNotify {
    /// Whether bgd was started by systemd with a notification socket (read once).
    static let isUnderSystemd = !(ProcessInfo.processInfo.environment["NOTIFY_SOCKET"] ?? "").isEmpty

    @discardableResult
    static func send(_ state: String, environment: [String: String] = ProcessInfo.processInfo.environment) -> Bool {
        guard let path = environment["NOTIFY_SOCKET"], !path.isEmpty else { return false }
        let descriptor = UnixDatagram.makeSocket()
        defer { if descriptor >= 0 { close(descriptor) } }
        return UnixDatagram.send(state, to: path, from: descriptor)
    }
}
