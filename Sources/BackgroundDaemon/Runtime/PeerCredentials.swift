import NIOCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// Who is at the other end of a Unix-socket connection, as the kernel says (`SO_PEERCRED`):
/// taken when the peer connected, so a process cannot claim to be another.
public struct PeerCredentials: Sendable, Equatable {
    public var processID: Int32
    public var userID: UInt32
    public var groupID: UInt32

    /// Laid out as Linux's `struct ucred`.
    private struct Raw: Sendable {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }

    /// The peer of `channel`, or nil when the kernel does not say (not a Unix socket, not Linux).
    public static func of(_ channel: any Channel) async -> PeerCredentials? {
        #if os(Linux)
            guard let provider = channel as? any SocketOptionProvider else { return nil }
            let future: EventLoopFuture<Raw> = provider.unsafeGetSocketOption(
                level: SocketOptionLevel(SOL_SOCKET), name: SocketOptionName(SO_PEERCRED))
            guard let raw = try? await future.get(), raw.pid > 0 else { return nil }
            return PeerCredentials(processID: raw.pid, userID: raw.uid, groupID: raw.gid)
        #else
            return nil
        #endif
    }
}

/// What /proc/<pid>/stat says of a process: the fields after its name in brackets (the name
/// may hold spaces and brackets itself), so `fields[0]` is field 3 of proc(5), the state.
enum ProcStat {
    static func fields(of pid: Int32) -> [Substring]? {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return nil }
        return stat[stat.index(after: close)...].split(separator: " ")
    }
}

/// The ancestry of processes, from /proc: whether one descends from another.
enum ProcessTree {
    /// The parent of `pid` (field 4).
    static func parent(of pid: Int32) -> Int32? {
        guard let fields = ProcStat.fields(of: pid), fields.count > 1 else { return nil }
        return Int32(fields[1])
    }

    /// `pid` itself or, walking its parents, the first of `roots` it descends from.
    static func ancestor(of pid: Int32, among roots: Set<Int32>) -> Int32? {
        var current = pid
        for _ in 0..<64 {
            if roots.contains(current) { return current }
            guard current > 1, let next = parent(of: current), next != current else { return nil }
            current = next
        }
        return nil
    }
}
