import BackgroundModel
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Whether the network the machine uses is metered, as the desktop knows it: NetworkManager's
/// `GENERAL.METERED` for the device of the default route (a phone's Wi-Fi hotspot says `yes
/// (guessed)`, a connection the user marked says `yes`). sysfs can only guess from the device type
/// (a cellular modem); where NetworkManager is there, its word wins.
public struct NetworkManagerMetered: Sendable {
    /// `nmcli`; nil where NetworkManager is not installed.
    let nmcli: String?
    /// The kernel's IPv4 routes, to find the default route's device.
    let routes: String

    public init(nmcli: String?, routes: String) {
        self.nmcli = nmcli
        self.routes = routes
    }

    public static let system = NetworkManagerMetered(
        nmcli: ["/usr/bin/nmcli", "/bin/nmcli"].first { FileManager.default.isExecutableFile(atPath: $0) },
        routes: "/proc/net/route")

    /// The device of the default route, if there is one.
    func defaultDevice() -> String? {
        guard let table = try? String(contentsOfFile: routes, encoding: .utf8) else { return nil }
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(whereSeparator: { $0 == "\t" || $0 == " " })
            if fields.count > 1 && fields[1] == "00000000" { return String(fields[0]) }
        }
        return nil
    }

    /// NetworkManager's verdict for the default route's device and where it came from; nil
    /// when NetworkManager has none (not installed, not running, the device not its own).
    func read() -> (metered: Bool, source: String)? {
        guard let nmcli, let device = defaultDevice(),
            let answer = Self.output(of: nmcli, ["-t", "-g", "GENERAL.METERED", "device", "show", device])
        else { return nil }
        let value = answer.trimmingCharacters(in: .whitespacesAndNewlines)
        let source = "NetworkManager: \(device) GENERAL.METERED=\(value)"
        if value.hasPrefix("yes") { return (true, source) }
        if value.hasPrefix("no") { return (false, source) }
        return nil  // "unknown"
    }

    /// Runs `program` (posix_spawn, not Foundation's Process, whose SIGCHLD source would start
    /// libdispatch's once-a-second monitor in bgd) and returns what it printed if it exited 0
    /// within a second and a page of output.
    static func output(of program: String, _ arguments: [String]) -> String? {
        #if os(Linux)
            var pipeEnds: [Int32] = [0, 0]
            guard pipe(&pipeEnds) == 0 else { return nil }
            defer { close(pipeEnds[0]) }
            var actions = posix_spawn_file_actions_t()
            posix_spawn_file_actions_init(&actions)
            defer { posix_spawn_file_actions_destroy(&actions) }
            posix_spawn_file_actions_adddup2(&actions, pipeEnds[1], 1)
            posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0)
            let argv = ([program] + arguments).map { strdup($0) } + [nil]
            defer { for pointer in argv { free(pointer) } }
            var pid: pid_t = 0
            let spawned = posix_spawn(&pid, program, &actions, nil, argv, environ) == 0
            close(pipeEnds[1])
            guard spawned else { return nil }
            var output = [UInt8]()
            var buffer = [UInt8](repeating: 0, count: 4096)
            var entry = pollfd(fd: pipeEnds[0], events: Int16(POLLIN), revents: 0)
            while output.count < 4096, poll(&entry, 1, 1000) == 1 {
                let count = Glibc.read(pipeEnds[0], &buffer, buffer.count)
                if count <= 0 { break }
                output += buffer[0..<count]
            }
            kill(pid, SIGKILL)  // a no-op once it has exited; ends one that hangs
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            guard (status & 0x7f) == 0, (status >> 8) & 0xff == 0 else { return nil }
            return String(decoding: output, as: UTF8.self)
        #else
            return nil
        #endif
    }
}
