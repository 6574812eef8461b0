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
        #if os(Linux)
            guard var path = environment["NOTIFY_SOCKET"], !path.isEmpty else { return false }
            // "@name" is the abstract namespace: a leading NUL.
            let abstract = path.hasPrefix("@")
            if abstract { path.removeFirst() }
            let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { return false }
            defer { close(fd) }
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            let bytes = Array(path.utf8)
            let capacity = MemoryLayout.size(ofValue: address.sun_path)
            guard bytes.count + (abstract ? 1 : 0) < capacity else { return false }
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                let offset = abstract ? 1 : 0
                for (index, byte) in bytes.enumerated() { raw[offset + index] = byte }
            }
            let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + (abstract ? 1 : 0))
            let sent = state.utf8CString.withUnsafeBufferPointer { message in
                withUnsafePointer(to: &address) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(fd, message.baseAddress, message.count - 1, 0, $0, length)
                    }
                }
            }
            return sent >= 0
        #else
            return false
        #endif
    }
}
