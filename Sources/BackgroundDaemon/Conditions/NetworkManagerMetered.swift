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
