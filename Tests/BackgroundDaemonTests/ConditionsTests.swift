import BackgroundDaemon
import BackgroundGateway
import BackgroundModel
import BackgroundTesting
import Foundation
import NIOHTTP1
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// A sysfs tree of our own, laid out like Linux's.
struct FakeSysfs {
    let root = TemporaryDirectory.make() + "/sys"

    func write(_ path: String, _ value: String) throws {
        let url = URL(fileURLWithPath: root + "/" + path)
        try FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        try (value + "\n").write(to: url, atomically: true, encoding: .utf8)
    }

    /// Writes each file, in order.
    func write(_ files: KeyValuePairs<String, String>) throws {
        for (path, value) in files { try write(path, value) }
    }

    /// A link that says "unknown" with a carrier, as tun, WireGuard and ppp do, of ARPHRD `type`.
    func carrierLink(_ name: String, type: Int) throws {
        try write("class/net/\(name)/operstate", "unknown")
        try write("class/net/\(name)/carrier", "1")
        try write("class/net/\(name)/type", "\(type)")
    }

    func laptop(onAC: Bool = false, capacity: Int = 80, network: String = "eth0") throws {
        try write("class/power_supply/AC/type", "Mains")
        try write("class/power_supply/AC/online", onAC ? "1" : "0")
        try write("class/power_supply/BAT0/type", "Battery")
        try write("class/power_supply/BAT0/status", onAC ? "Charging" : "Discharging")
        try write("class/power_supply/BAT0/capacity", "\(capacity)")
        try write("class/net/lo/operstate", "unknown")
        try write("class/net/lo/carrier", "1")
        try write("class/net/\(network)/operstate", "up")
        try write(
            "class/net/\(network)/uevent",
            network.hasPrefix("wwan") ? "DEVTYPE=wwan\nINTERFACE=\(network)" : "INTERFACE=\(network)")
    }
}

struct SysfsConditionsTests {
    @Test func aLaptopOnBattery() throws {
        let sysfs = FakeSysfs()
        try sysfs.laptop(capacity: 42)
        let (conditions, sources) = SysfsConditions(root: sysfs.root).read()
        #expect(conditions == DeviceConditions(power: .battery, batteryLevel: 42, network: .unmetered))
        #expect(sources.contains(sysfs.root + "/class/power_supply/BAT0"))
    }

    @Test func aLaptopPluggedIn() throws {
        let sysfs = FakeSysfs()
        try sysfs.laptop(onAC: true, capacity: 42)
        #expect(SysfsConditions(root: sysfs.root).read().conditions.power == .mains)
    }

    /// Two batteries (a ThinkPad's internal and external packs): the idle one says Full while
    /// the other is drained, and the charger is unplugged. Before, "Full" read as on mains, and
    /// tasks that need power started on battery.
    @Test func aLaptopWithTwoBatteriesOneFullOneDischargingIsOnBattery() throws {
        let sysfs = FakeSysfs()
        try sysfs.laptop(capacity: 60)
        try sysfs.write([
            "class/power_supply/BAT1/type": "Battery", "class/power_supply/BAT1/status": "Full",
            "class/power_supply/BAT1/capacity": "100",
        ])
        #expect(SysfsConditions(root: sysfs.root).read().conditions.power == .battery)
        // Plugged in, the drained pack charges and the full one stays full: mains.
        try sysfs.write(["class/power_supply/AC/online": "1", "class/power_supply/BAT0/status": "Charging"])
        #expect(SysfsConditions(root: sysfs.root).read().conditions.power == .mains)
        // No mains supply listed (some firmware): a charging battery is still the word for mains.
        try FileManager.default.removeItem(atPath: sysfs.root + "/class/power_supply/AC")
        #expect(SysfsConditions(root: sysfs.root).read().conditions.power == .mains)
    }

    /// Supplies of every kind the kernel names count: a laptop on a USB-PD or wireless charger
    /// is on mains (they were read as on battery), a battery held below full by a charge
    /// threshold ("Not charging") means the adapter is in, and a phone on a charging pad
    /// (scope Device) is not the machine's. Two packs' level is weighted by what each holds.
    @Test func everyKindOfSupplyAndPackCounts() throws {
        for type in ["USB_PD_DRP", "USB_DCP", "Wireless", "BrickID", "UPS"] {
            let sysfs = FakeSysfs()
            try sysfs.laptop(capacity: 50)
            try FileManager.default.removeItem(atPath: sysfs.root + "/class/power_supply/AC")
            try sysfs.write(["class/power_supply/charger/type": type, "class/power_supply/charger/online": "1"])
            #expect(SysfsConditions(root: sysfs.root).read().conditions.power == .mains, "\(type)")
            try sysfs.write("class/power_supply/charger/scope", "Device")
            #expect(SysfsConditions(root: sysfs.root).read().conditions.power == .battery, "\(type) of a device")
        }
        let sysfs = FakeSysfs()
        try sysfs.laptop(capacity: 5)
        // Firmware that lists no adapter, the battery held below full.
        try FileManager.default.removeItem(atPath: sysfs.root + "/class/power_supply/AC")
        try sysfs.write("class/power_supply/BAT0/status", "Not charging")
        #expect(SysfsConditions(root: sysfs.root).read().conditions.power == .mains, "held below full")
        try sysfs.write([
            "class/power_supply/BAT0/status": "Discharging", "class/power_supply/BAT0/energy_full": "24000000",
            "class/power_supply/BAT1/type": "Battery", "class/power_supply/BAT1/status": "Discharging",
            "class/power_supply/BAT1/capacity": "80", "class/power_supply/BAT1/energy_full": "72000000",
        ])
        #expect(SysfsConditions(root: sysfs.root).read().conditions.batteryLevel == 61)
        try FileManager.default.removeItem(atPath: sysfs.root + "/class/power_supply/BAT1/energy_full")
        #expect(SysfsConditions(root: sysfs.root).read().conditions.batteryLevel == 42, "no energy: the plain mean")
    }

    @Test func aServerWithoutABatteryIsOnMains() throws {
        let sysfs = FakeSysfs()
        try sysfs.write("class/net/eth0/operstate", "up")
        let conditions = SysfsConditions(root: sysfs.root).read().conditions
        #expect(conditions == DeviceConditions(power: .mains, batteryLevel: nil, network: .unmetered))
    }

    @Test func onlyACellularModemIsMetered() throws {
        let sysfs = FakeSysfs()
        try sysfs.laptop(network: "wwan0")
        try sysfs.write("class/net/wlan0/operstate", "down")
        #expect(SysfsConditions(root: sysfs.root).read().conditions.network == .metered)
        try sysfs.write("class/net/wlan0/operstate", "up")
        #expect(SysfsConditions(root: sysfs.root).read().conditions.network == .unmetered)
    }

    @Test func onlyLoopbackIsNoNetwork() throws {
        let sysfs = FakeSysfs()
        try sysfs.laptop(network: "eth0")
        try sysfs.write("class/net/eth0/operstate", "down")
        #expect(SysfsConditions(root: sysfs.root).read().conditions.network == .none)
        // A tunnel alone carries nothing: a VPN daemon holds tun0 open ("unknown", with a
        // carrier) whether or not there is a network under it.
        try sysfs.carrierLink("tun0", type: 65534)
        #expect(SysfsConditions(root: sysfs.root).read().conditions.network == .none)
        // ppp says "unknown" too, with a carrier: that is a network (a modem's).
        try sysfs.carrierLink("ppp0", type: 512)
        #expect(SysfsConditions(root: sysfs.root).read().conditions.network == .unmetered)
    }

    /// A VPN on a cellular modem is metered; containers' bridge and ports are no network of
    /// their own; a container's own veth is its network. Before, any tunnel, bridge or port up
    /// counted as an unmetered network.
    @Test func tunnelsAndBridgesRideOnTheLinkUnderThem() throws {
        let cellular = FakeSysfs()
        try cellular.laptop(network: "wwan0")
        try cellular.carrierLink("wg0", type: 65534)
        #expect(SysfsConditions(root: cellular.root).read().conditions.network == .metered)
        // A QMI modem in raw-IP mode says NONE as tun does, but it is hardware: still the network.
        try cellular.write("class/net/wwan0/type", "65534")
        try cellular.write("class/net/wwan0/device/vendor", "0x1199")
        try cellular.write("class/net/wg0/operstate", "down")
        #expect(SysfsConditions(root: cellular.root).read().conditions.network == .metered)

        let host = FakeSysfs()
        try host.laptop(network: "eth0")
        try host.write([
            "class/net/eth0/operstate": "down", "class/net/eth0/device/vendor": "0x8086",
            "class/net/docker0/operstate": "up", "class/net/docker0/bridge/forward_delay": "1500",
            "class/net/veth1a2b/operstate": "up", "class/net/veth1a2b/brport/state": "3",
        ])
        #expect(SysfsConditions(root: host.root).read().conditions.network == .none)
        // The Ethernet card in a bridge of its own (a VM host's br0) still counts.
        try host.write("class/net/eth0/operstate", "up")
        try host.write("class/net/eth0/brport/state", "3")
        #expect(SysfsConditions(root: host.root).read().conditions.network == .unmetered)

        let container = FakeSysfs()
        try container.write("class/net/eth0/operstate", "up")
        try container.write("class/net/eth0/type", "1")
        #expect(SysfsConditions(root: container.root).read().conditions.network == .unmetered)
    }

    /// Garbage in the files, a mouse's battery, no sysfs at all: sensible answers, no crash.
    @Test func oddTreesGiveSensibleAnswers() throws {
        let sysfs = FakeSysfs()
        try sysfs.write([
            "class/power_supply/BAT0/type": "Battery", "class/power_supply/BAT0/status": "Discharging",
            "class/power_supply/BAT0/capacity": "lots", "class/power_supply/hidpp_battery_0/type": "Battery",
            "class/power_supply/hidpp_battery_0/scope": "Device", "class/power_supply/hidpp_battery_0/capacity": "3",
        ])
        try sysfs.write("class/net/eth0/operstate", String(repeating: "x", count: 100_000))
        let conditions = SysfsConditions(root: sysfs.root).read().conditions
        #expect(conditions == DeviceConditions(power: .battery, batteryLevel: nil, network: .none))
        let nothing = SysfsConditions(root: sysfs.root + "/missing").read()
        #expect(nothing.conditions == .unconstrained)
        // Two batteries whose drivers say Int.max and -5: a percentage each (their sum overflowed).
        let huge = FakeSysfs()
        for (battery, capacity) in [("BAT0", "9223372036854775807"), ("BAT1", "9223372036854775807"), ("BAT2", "-5")] {
            try huge.write("class/power_supply/\(battery)/type", "Battery")
            try huge.write("class/power_supply/\(battery)/capacity", capacity)
        }
        #expect(SysfsConditions(root: huge.root).read().conditions.batteryLevel == 66)
    }
}

/// Conditions on a live daemon: sensed from a sysfs tree, overridden with `bgctl env`.
@Suite(.timeLimit(.minutes(5)))
struct DaemonConditionsTests {
    static let app = "com.example.conditions"
    static let start = Date(timeIntervalSince1970: 1_767_603_600)

    func fixture() throws -> [String] { [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"] }

    func bgctl(_ daemon: TestDaemon, _ arguments: String...) async throws -> Command.Output {
        try await Command.run(try BuiltProducts.path(of: "bgctl"), arguments + ["--socket", daemon.socketPath])
    }

    @Test func sensesTheBatteryAndFollowsItsChanges() async throws {
        let sysfs = FakeSysfs()
        try sysfs.laptop(capacity: 80)
        try await TestDaemon.with(
            clock: ManualClock(now: Self.start),
            conditions: .init(sensing: .sysfs(root: sysfs.root), pollInterval: .seconds(60))
        ) { daemon in
            let report = try await daemon.admin.send(.get, "/v1/env", as: ConditionsReport.self)
            #expect(report.effective == DeviceConditions(power: .battery, batteryLevel: 80, network: .unmetered))

            try await daemon.register(Self.app, command: try fixture(), interval: .minimum)
            // On battery an interval wake comes half as often: 30 minutes, not 15.
            let due = try await daemon.plannedWake(of: Self.app) { $0.reasons.contains { $0.code == .onBattery } }
            #expect(due == Self.start.addingTimeInterval(30 * 60))

            // The battery runs low: the next poll sees it and every wake waits.
            try sysfs.write("class/power_supply/BAT0/capacity", "12")
            daemon.clock.advance(by: .seconds(60))
            try await daemon.waitUntil { try await daemon.why(Self.app).reasons.contains { $0.code == .lowBattery } }
            #expect(try await daemon.why(Self.app).nextWake == nil)
            let forecast = try await daemon.admin.send(.get, "/v1/apps/\(Self.app)/forecast", as: WakeForecast.self)
            #expect(forecast.wakes.isEmpty)
            #expect(forecast.holdback?.code == .lowBattery)

            // Plugged in: woken at the interval again, from the same clock.
            try sysfs.write("class/power_supply/AC/online", "1")
            try sysfs.write("class/power_supply/BAT0/status", "Charging")
            daemon.clock.advance(by: .seconds(60))
            let plugged = try await daemon.plannedWake(of: Self.app) { !$0.reasons.contains { $0.code == .lowBattery } }
            #expect(plugged == Self.start.addingTimeInterval(15 * 60))
        }
    }

    /// The kernel says when power or the network changed (netlink): the conditions are read
    /// again then, not at the next poll — an hour away here, on a clock that does not move.
    /// The changes are real kernel announcements (root makes them; this machine has no battery,
    /// so a uevent is synthesised on `lo` as a power supply sends one) over a fake sysfs tree.
    @Test(.enabled(if: getuid() == 0, "only root can make the kernel announce a change"))
    func followsTheKernelsAnnouncementsNotAPoll() async throws {
        let sysfs = FakeSysfs()
        try sysfs.laptop(capacity: 80)
        try await TestDaemon.with(
            clock: ManualClock(now: Self.start),
            conditions: .init(sensing: .sysfs(root: sysfs.root), pollInterval: .seconds(3600))
        ) { daemon in
            try await daemon.register(Self.app, command: try fixture(), interval: .minimum)
            func effective() async throws -> DeviceConditions {
                try await daemon.admin.send(.get, "/v1/env", as: ConditionsReport.self).effective
            }
            // A uevent (NETLINK_KOBJECT_UEVENT).
            try sysfs.write("class/power_supply/BAT0/capacity", "12")
            try "change".write(toFile: "/sys/class/net/lo/uevent", atomically: false, encoding: .utf8)
            try await daemon.waitUntil { try await effective().batteryLevel == 12 }
            // An address coming and going (NETLINK_ROUTE).
            try sysfs.write("class/power_supply/AC/online", "1")
            let add = try await Command.run("/usr/sbin/ip", ["address", "add", "127.0.0.77/8", "dev", "lo"])
            let remove = try await Command.run("/usr/sbin/ip", ["address", "del", "127.0.0.77/8", "dev", "lo"])
            #expect(add.status == 0 && remove.status == 0, "\(add.standardError)\(remove.standardError)")
            try await daemon.waitUntil { try await effective().power == .mains }
            // A route coming and going, and nothing else (NETLINK_ROUTE's route groups): the
            // default route, which NetworkManager is asked about, can come after its address.
            try sysfs.write("class/power_supply/BAT0/capacity", "34")
            let route = try await Command.run("/usr/sbin/ip", ["route", "add", "198.51.100.0/24", "dev", "lo"])
            let unroute = try await Command.run("/usr/sbin/ip", ["route", "del", "198.51.100.0/24", "dev", "lo"])
            #expect(route.status == 0 && unroute.status == 0, "\(route.standardError)\(unroute.standardError)")
            try await daemon.waitUntil { try await effective().batteryLevel == 34 }
        }
    }

    /// Metered as the desktop knows it: NetworkManager's GENERAL.METERED for the default route's
    /// device wins over sysfs's guess (a phone's hotspot looks like any Wi-Fi to sysfs), and the
    /// report says where it came from. A stand-in nmcli answers as the real one does.
    @Test func networkManagerSaysWhetherTheNetworkIsMetered() async throws {
        let sysfs = FakeSysfs()
        try sysfs.laptop(onAC: true, capacity: 90)
        let directory = TemporaryDirectory.make()
        let answer = directory + "/metered"
        try "yes (guessed)\n".write(toFile: answer, atomically: true, encoding: .utf8)
        let nmcli = directory + "/nmcli"
        try """
        #!/bin/sh
        [ "$*" = "-t -g GENERAL.METERED device show eth0" ] || exit 10
        cat \(answer)
        """.write(toFile: nmcli, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: nmcli)
        let routes = directory + "/route"
        try "Iface\tDestination\tGateway\tFlags\neth0\t0000A8C0\t00000000\t0001\neth0\t00000000\t0100A8C0\t0003\n"
            .write(toFile: routes, atomically: true, encoding: .utf8)
        try await TestDaemon.with(
            clock: ManualClock(now: Self.start),
            conditions: .init(
                sensing: .sysfs(root: sysfs.root), kernelEvents: false, pollInterval: .seconds(60),
                networkManager: NetworkManagerMetered(nmcli: nmcli, routes: routes))
        ) { daemon in
            try await daemon.register(Self.app, command: try fixture(), interval: .minimum)
            let report = try await daemon.admin.send(.get, "/v1/env", as: ConditionsReport.self)
            #expect(report.effective.network == .metered, "\(report.sources)")
            #expect(report.sources.contains("NetworkManager: eth0 GENERAL.METERED=yes (guessed)"), "\(report.sources)")
            // The user marks the connection unmetered: the next reading follows.
            try "no\n".write(toFile: answer, atomically: true, encoding: .utf8)
            daemon.clock.advance(by: .seconds(60))
            try await daemon.waitUntil {
                try await daemon.admin.send(.get, "/v1/env", as: ConditionsReport.self).effective.network == .unmetered
            }
        }
        // Without NetworkManager, sysfs decides (eth0 is not a modem: unmetered).
        try await TestDaemon.with(
            clock: ManualClock(now: Self.start),
            conditions: .init(
                sensing: .sysfs(root: sysfs.root), kernelEvents: false,
                networkManager: NetworkManagerMetered(nmcli: nil, routes: routes))
        ) { daemon in
            let report = try await daemon.admin.send(.get, "/v1/env", as: ConditionsReport.self)
            #expect(report.effective.network == .unmetered)
            #expect(!report.sources.contains { $0.hasPrefix("NetworkManager") })
        }
    }

    @Test func bgctlEnvOverridesAndTheOverridesSurviveARestart() async throws {
        let directory = TemporaryDirectory.make()
        try await TestDaemon.with(clock: ManualClock(now: Self.start), directory: directory) { daemon in
            try await daemon.register(Self.app, command: try fixture(), interval: .minimum)
            _ = try await daemon.plannedWake(of: Self.app)

            let offline = try await bgctl(daemon, "env", "set", "--network", "none")
            #expect(offline.status == 0, "\(offline.standardError)")
            #expect(offline.standardOutput.contains("network"))
            try await daemon.waitUntil { try await daemon.why(Self.app).reasons.contains { $0.code == .noNetwork } }
            daemon.clock.advance(by: .seconds(3600))
            let runs = try await daemon.admin.send(.get, "/v1/apps/\(Self.app)/history", as: [RunRecord].self)
            #expect(runs.isEmpty)

            let battery = try await bgctl(daemon, "env", "set", "--power", "battery", "--battery", "50%", "--json")
            #expect(battery.status == 0, "\(battery.standardError)")
            let report = try WireCoding.makeDecoder().decode(
                ConditionsReport.self, from: Data(battery.standardOutput.utf8))
            // Earlier overrides are kept.
            #expect(
                report.overrides
                    == ConditionOverrides(power: .battery, batteryLevel: 50, network: DeviceConditions.Network.none))
        }
        try await TestDaemon.with(clock: ManualClock(now: Self.start.addingTimeInterval(7200)), directory: directory) {
            daemon in
            let report = try await daemon.admin.send(.get, "/v1/env", as: ConditionsReport.self)
            #expect(report.effective.network == DeviceConditions.Network.none)
            #expect(report.effective.batteryLevel == 50)
            // Back online: the wake held for two hours comes at once.
            let run = try await daemon.waitForRunEnd(of: Self.app) {
                let reset = try await bgctl(daemon, "env", "reset")
                #expect(reset.status == 0)
            }
            #expect(run.startedAt == Self.start.addingTimeInterval(7200))
        }
    }

    @Test func badOverridesChangeNothing() async throws {
        try await TestDaemon.with { daemon in
            let bodies = [#"{"batteryLevel": 150}"#, #"{"network": "wifi"}"#, #"{"power": 1}"#, "not json", #"[]"#]
            for body in bodies {
                let answer = try await RawHTTP.request(daemon.socketPath, .PUT, "/v1/env", body: Data(body.utf8))
                #expect(answer.status == 400, "\(body)")
                #expect(
                    ["invalidConditions", "malformedRequest"].contains(answer.errorCode ?? ""),
                    "\(body): \(answer.errorCode ?? "-")")
            }
            let report = try await daemon.admin.send(.get, "/v1/env", as: ConditionsReport.self)
            #expect(report.overrides.isEmpty)
            for arguments in [["--battery", "150"], ["--network", "wifi"], ["--power", "solar"], []] {
                let refused = try await Command.run(
                    try BuiltProducts.path(of: "bgctl"), ["env", "set"] + arguments + ["--socket", daemon.socketPath])
                #expect(refused.status != 0, "\(arguments)")
                #expect(!refused.standardError.isEmpty)
            }
            #expect(try await daemon.admin.send(.get, "/v1/env", as: ConditionsReport.self).overrides.isEmpty)
        }
    }
}
