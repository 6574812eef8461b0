import BackgroundModel
import Foundation

/// Reads the machine's power and network from Linux's sysfs: `class/power_supply/*` (type,
/// online, status, capacity) and `class/net/*` (operstate, carrier, uevent's DEVTYPE, and type,
/// bridge, brport and device to pass over tunnels and bridges).
///
/// The root is a parameter so that tests can lay out a sysfs tree of their own. Where there is
/// no sysfs (macOS) the machine reads as plugged in and online: an unknown is not a reason to
/// stop every app.
public struct SysfsConditions: Sendable {
    public let root: String

    public init(root: String = "/sys") { self.root = root }

    /// The conditions now, and the files they were read from.
    public func read() -> (conditions: DeviceConditions, sources: [String]) {
        var sources: [String] = []
        let (power, level) = readPower(sources: &sources)
        let network = readNetwork(sources: &sources)
        return (DeviceConditions(power: power, batteryLevel: level, network: network), sources)
    }

    private func readPower(sources: inout [String]) -> (DeviceConditions.PowerSource, Int?) {
        let directory = root + "/class/power_supply"
        var externalOnline = false
        var batteryCharging = false
        var batteryDischarging = false
        var batteryFound = false
        var levels: [(percent: Int, energy: Int?)] = []
        for name in entries(of: directory) {
            let path = directory + "/" + name
            // Peripherals (a mouse's battery, a phone on a charging pad) report scope "Device";
            // only the system's own supplies count.
            guard let type = value(path + "/type"), value(path + "/scope") != "Device" else { continue }
            switch type {
            case "Battery":
                sources.append(path)
                batteryFound = true
                // A percentage: anything else (a driver's garbage) is bounded, not summed into an overflow.
                if let capacity = value(path + "/capacity").flatMap(Int.init) {
                    // Energy (µWh) where the pack says it; a pack that only knows its charge (µAh)
                    // is not weighed against one in another unit: the plain mean then.
                    let energy = value(path + "/energy_full").flatMap(Int.init)
                    levels.append((min(max(capacity, 0), 100), energy.flatMap { $0 > 0 ? $0 : nil }))
                }
                switch value(path + "/status") {
                // "Not charging": on the adapter, held below full by a charge threshold.
                case "Charging", "Full", "Not charging": batteryCharging = true
                case "Discharging": batteryDischarging = true
                default: break
                }
            case "Unknown":
                continue
            default:
                // Every other type is a supply from outside: Mains, the USB family (USB_C, USB_PD,
                // USB_PD_DRP, USB_DCP, USB_CDP, USB_ACA), Wireless, BrickID, UPS. A list of some
                // of them read a laptop on a USB-PD or wireless charger as on battery.
                sources.append(path)
                if value(path + "/online") == "1" { externalOnline = true }
            }
        }
        // No battery at all: a desktop or a server, always on mains. A battery that charges or is
        // full says so where firmware lists no mains supply — unless another one is draining: of
        // two packs the idle one says Full while the machine runs on the other.
        let onMains = externalOnline || (batteryCharging && !batteryDischarging) || !batteryFound
        return (onMains ? .mains : .battery, Self.level(of: levels))
    }

    /// The machine's charge over all its batteries: each pack's percentage weighted by the energy
    /// it holds when full, where every pack says (a 24 Wh pack at 5 % beside a 72 Wh one at 80 %
    /// is 61 %, not 42 %); otherwise their plain mean.
    static func level(of batteries: [(percent: Int, energy: Int?)]) -> Int? {
        guard !batteries.isEmpty else { return nil }
        let energies = batteries.compactMap(\.energy)
        guard energies.count == batteries.count else {
            return batteries.map(\.percent).reduce(0, +) / batteries.count
        }
        // In Double: energies are µWh, and their products with percentages could overflow.
        let full = energies.reduce(0.0) { $0 + Double($1) }
        let held = batteries.reduce(0.0) { $0 + Double($1.percent) * Double($1.energy!) }
        return Int((held / full).rounded())
    }

    private func readNetwork(sources: inout [String]) -> DeviceConditions.Network {
        let directory = root + "/class/net"
        guard FileManager.default.fileExists(atPath: directory) else {
            sources.append("no \(directory): network assumed up")
            return .unmetered
        }
        var up: [(name: String, metered: Bool)] = []
        for name in entries(of: directory) where name != "lo" {
            let path = directory + "/" + name
            if ridesOnAnotherLink(path) { continue }
            let state = value(path + "/operstate")
            // Some virtual links (tun, ppp) say "unknown" while carrying traffic; their carrier tells.
            guard state == "up" || (state == "unknown" && value(path + "/carrier") == "1") else { continue }
            sources.append(path)
            let devtype = (value(path + "/uevent") ?? "").split(separator: "\n").first { $0.hasPrefix("DEVTYPE=") }
            let metered = devtype == "DEVTYPE=wwan" || name.hasPrefix("wwan") || name.hasPrefix("rmnet")
            up.append((name, metered))
        }
        if up.isEmpty { return .none }
        return up.allSatisfy(\.metered) ? .metered : .unmetered
    }

    /// Plumbing whose traffic goes out over another link, which counts for itself: a tunnel
    /// (tun, WireGuard, GRE, IPIP, SIT), a bridge, a virtual port of a bridge (a container's
    /// veth on the host). Counted, a VPN daemon holding tun0 open made a laptop with no network
    /// look online, one on cellular with a VPN look unmetered, and running containers kept an
    /// offline host online.
    private func ridesOnAnotherLink(_ path: String) -> Bool {
        let manager = FileManager.default
        // Hardware is never plumbing, whatever its type: a QMI modem in raw-IP mode is NONE too.
        if manager.fileExists(atPath: path + "/device") { return false }
        if let type = value(path + "/type").flatMap(Int.init), Self.tunnelTypes.contains(type) { return true }
        return manager.fileExists(atPath: path + "/bridge") || manager.fileExists(atPath: path + "/brport")
    }

    /// `ARPHRD_` types of tunnels (if_arp.h): TUNNEL, TUNNEL6, SIT, IPGRE, IP6GRE, NONE (tun,
    /// WireGuard). A physical link is 1 (Ethernet, Wi-Fi), ppp 512, a raw-IP modem 519 or NONE.
    static let tunnelTypes: Set<Int> = [768, 769, 776, 778, 823, 65534]

    private func entries(of directory: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []).sorted()
    }

    /// A sysfs attribute, trimmed; nil when absent or unreadable. Attributes are small; a
    /// hostile or odd tree cannot make this read more than a page.
    private func value(_ path: String) -> String? {
        guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.read(upToCount: 4096) else { return nil }
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}
