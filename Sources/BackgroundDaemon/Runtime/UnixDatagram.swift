import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// One datagram to a Unix socket by path ("@name": the abstract namespace) — how bgd speaks to
/// systemd (`NOTIFY_SOCKET`) and to journald (`/run/systemd/journal/socket`).
public enum UnixDatagram {
    /// A datagram socket for `send`; -1 where there is none.
    public static func makeSocket() -> Int32 {
        #if os(Linux)
            socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #else
            -1
        #endif
    }

    /// Whether the kernel took `message` for `path` (no listener, or a message too large: false).
    public static func send(_ message: String, to path: String, from descriptor: Int32) -> Bool {
        #if os(Linux)
            guard descriptor >= 0, !path.isEmpty else { return false }
            let abstract = path.hasPrefix("@")
            let bytes = Array(path.utf8.dropFirst(abstract ? 1 : 0))
            let offset = abstract ? 1 : 0  // the abstract namespace: a leading NUL
            var address = sockaddr_un()
            address.sun_family = sa_family_t(AF_UNIX)
            guard bytes.count + offset < MemoryLayout.size(ofValue: address.sun_path) else { return false }
            withUnsafeMutableBytes(of: &address.sun_path) { raw in
                for (index, byte) in bytes.enumerated() { raw[offset + index] = byte }
            }
            let length = socklen_t(MemoryLayout<sa_family_t>.size + bytes.count + offset)
            let sent = message.utf8CString.withUnsafeBufferPointer { text in
                withUnsafePointer(to: &address) { pointer in
                    pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(descriptor, text.baseAddress, text.count - 1, Int32(MSG_NOSIGNAL), $0, length)
                    }
                }
            }
            return sent >= 0
        #else
            return false
        #endif
    }
}
