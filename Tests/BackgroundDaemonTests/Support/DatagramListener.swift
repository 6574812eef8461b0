import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A Unix datagram socket bound at `path`, where systemd's would be (`NOTIFY_SOCKET`,
/// journald's `/run/systemd/journal/socket`).
final class DatagramListener: @unchecked Sendable {
    let descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)

    init(path: String) throws {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (index, byte) in path.utf8.enumerated() { raw[index] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
            }
        }
        guard bound else { throw POSIXError(.EADDRINUSE) }
    }

    deinit { close(descriptor) }

    /// Records until one satisfies `match` (waiting on the kernel, on a thread of its own),
    /// or nil after `seconds` without one.
    func record(within seconds: Int32, where match: @escaping @Sendable (String) -> Bool) async -> String? {
        let descriptor = self.descriptor
        return await withCheckedContinuation { continuation in
            Thread {
                var buffer = [UInt8](repeating: 0, count: 65536)
                var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
                while poll(&entry, 1, seconds * 1000) == 1 {
                    let count = recv(descriptor, &buffer, buffer.count, 0)
                    guard count > 0 else { break }
                    let record = String(decoding: buffer[0..<count], as: UTF8.self)
                    if match(record) { return continuation.resume(returning: record) }
                }
                continuation.resume(returning: nil)
            }.start()
        }
    }
}
