import BackgroundModel
import Foundation
import QuietThreads

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
    /// The kernel's IPv6 routes, for a network with no IPv4 default route (an IPv6-only carrier
    /// hotspot, NAT64).
    let routes6: String?

    public init(nmcli: String?, routes: String, routes6: String? = nil) {
        self.nmcli = nmcli
        self.routes = routes
        self.routes6 = routes6
    }

    public static let system = NetworkManagerMetered(
        nmcli: ["/usr/bin/nmcli", "/bin/nmcli"].first { FileManager.default.isExecutableFile(atPath: $0) },
        routes: "/proc/net/route", routes6: "/proc/net/ipv6_route")

    /// The device of the default route (IPv4's, else IPv6's), if there is one.
    func defaultDevice() -> String? {
        if let table = try? String(contentsOfFile: routes, encoding: .utf8) {
            for line in table.split(separator: "\n").dropFirst() {
                let fields = line.split(whereSeparator: { $0 == "\t" || $0 == " " })
                if fields.count > 1 && fields[1] == "00000000" { return String(fields[0]) }
            }
        }
        guard let routes6, let table = try? String(contentsOfFile: routes6, encoding: .utf8) else { return nil }
        // destination, its prefix length, source, its length, next hop, metric, refcount, use,
        // flags, device: ::/0, up (RTF_UP), not a reject route (RTF_REJECT; the kernel keeps one
        // on lo when there is no default); of several, the one the kernel prefers (lowest metric).
        var best: (metric: UInt32, device: String)?
        for line in table.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count == 10, fields[0] == String(repeating: "0", count: 32), fields[1] == "00",
                let metric = UInt32(fields[5], radix: 16), let flags = UInt32(fields[8], radix: 16),
                flags & 0x1 != 0, flags & 0x200 == 0, fields[9] != "lo"
            else { continue }
            if best.map({ metric < $0.metric }) ?? true { best = (metric, String(fields[9])) }
        }
        return best?.device
    }

    /// NetworkManager's verdict for the default route's device and where it came from; nil
    /// when NetworkManager has none (not installed, not running, the device not its own).
    func read() -> (metered: Bool, source: String)? {
        guard let nmcli, let device = defaultDevice(),
            let answer = ChildProcess.run(
                nmcli, ["-t", "-g", "GENERAL.METERED", "device", "show", device], timeout: .seconds(1),
                withErrors: false, limit: 4096),
            answer.status == 0
        else { return nil }
        let value = answer.output.trimmingCharacters(in: .whitespacesAndNewlines)
        let source = "NetworkManager: \(device) GENERAL.METERED=\(value)"
        if value.hasPrefix("yes") { return (true, source) }
        if value.hasPrefix("no") { return (false, source) }
        return nil  // "unknown"
    }
}
