import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A port on 127.0.0.1 that is free now and stays free while a test restarts the process that
/// listens on it.
///
/// The kernel's own pick (binding port 0) comes from the ephemeral range, where every outgoing
/// connection on the machine also takes its local port: under CI's parallel load one of them can
/// take a node's port in the moment between its kill and its restart, and the restart then fails
/// with "address already in use". A port below that range is never handed out that way; only
/// another test choosing the same one could collide (one in ~20,000 per pick).
func freeLoopbackPort() throws -> Int {
    let below = ephemeralPortRangeStart()
    for _ in 0..<200 {
        let candidate = Int.random(in: 10_000..<below)
        if canBindLoopback(port: candidate) { return candidate }
    }
    throw POSIXError(.EADDRINUSE)
}

/// The first port of `ip_local_port_range` (32768 by default on Linux, 49152 on macOS).
private func ephemeralPortRangeStart() -> Int {
    #if os(Linux)
        if let text = try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8),
            let first = text.split(whereSeparator: \.isWhitespace).first.flatMap({ Int($0) }), first > 10_100
        {
            return first
        }
        return 32_768
    #else
        return 49_152
    #endif
}

private func canBindLoopback(port: Int) -> Bool {
    let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard descriptor >= 0 else { return false }
    defer { close(descriptor) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = in_port_t(UInt16(port)).bigEndian
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
        }
    }
}

/// A port on 127.0.0.1 that listens and that nobody serves: it is taken (another listener cannot
/// bind it), and the kernel completes connections to it that then never hear a byte.
struct UnservedLoopbackPort {
    let descriptor: Int32
    let port: Int

    init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.descriptor = descriptor
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listening = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(descriptor, pointer, length) == 0 && listen(descriptor, 8) == 0
                    && getsockname(descriptor, pointer, &length) == 0
            }
        }
        guard listening else {
            _ = Glibc.close(descriptor)
            throw POSIXError(.EADDRNOTAVAIL)
        }
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    func close() { _ = Glibc.close(descriptor) }
}
