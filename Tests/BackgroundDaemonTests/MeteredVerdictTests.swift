import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Logging
import Testing

@testable import BackgroundDaemon

/// NetworkManager is asked again (a process forked) only when it may answer otherwise: on the
/// poll, or when the links up or the default route changed. A kernel event that changed neither
/// (a battery's uevent at each percent, an address's lifetime renewed) reuses its last word.
/// Before, every event forked nmcli.
struct MeteredVerdictTests {
    @Test func networkManagerIsAskedOnlyWhenItMayAnswerOtherwise() async throws {
        let sysfs = FakeSysfs()
        try sysfs.laptop(onAC: false, capacity: 90)
        let directory = TemporaryDirectory.make()
        let asked = directory + "/asked"
        let nmcli = directory + "/nmcli"
        try """
        #!/bin/sh
        echo "$*" >> \(asked)
        cat \(directory)/answer
        """.write(toFile: nmcli, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: nmcli)
        try "yes (guessed)\n".write(toFile: directory + "/answer", atomically: true, encoding: .utf8)
        let routes = directory + "/route"
        try "Iface\tDestination\tGateway\tFlags\neth0\t00000000\t0100A8C0\t0003\n"
            .write(toFile: routes, atomically: true, encoding: .utf8)
        let store = try BackgroundStore.open(atPath: directory + "/bgd.sqlite", durability: .normal)
        let monitor = try await ConditionsMonitor(
            configuration: .init(
                sensing: .sysfs(root: sysfs.root), kernelEvents: false,
                networkManager: NetworkManagerMetered(nmcli: nmcli, routes: routes)),
            store: store, doorbells: [], logger: Logger(label: "test"))
        func times() -> Int {
            ((try? String(contentsOfFile: asked, encoding: .utf8)) ?? "").split(separator: "\n").count
        }
        let first = await monitor.effective
        #expect(times() == 1 && first.network == .metered)

        // The battery's charge moves, an address is renewed: the same links, the same route.
        try sysfs.write("class/power_supply/BAT0/capacity", "89")
        await monitor.refresh(because: "power_supply uevent")
        await monitor.refresh(because: "a network link, address or route")
        #expect(times() == 1, "nobody asked NetworkManager again")
        let later = await monitor.effective
        #expect(later == DeviceConditions(power: .battery, batteryLevel: 89, network: .metered))

        // Another link comes up: asked again.
        try sysfs.write("class/net/wlan0/operstate", "up")
        await monitor.refresh(because: "a network link, address or route")
        #expect(times() == 2)
        // The poll asks whatever changed.
        await monitor.refresh()
        #expect(times() == 3)
        // No answer (a connection still activating says "unknown"): the next network event asks
        // again, a battery's does not (nmcli there, NetworkManager not running: each percent
        // forked it).
        try "unknown\n".write(toFile: directory + "/answer", atomically: true, encoding: .utf8)
        await monitor.refresh()
        await monitor.refresh(because: "power_supply uevent")
        #expect(times() == 4)
        try "yes\n".write(toFile: directory + "/answer", atomically: true, encoding: .utf8)
        await monitor.refresh(because: "a network link, address or route")
        #expect(times() == 5)
        let answered = await monitor.effective
        #expect(answered.network == .metered)
    }

    /// An IPv6-only network (a carrier's hotspot, NAT64) has no IPv4 default route: its device is
    /// IPv6's default route's, passing over the reject route the kernel keeps on lo.
    @Test func theDefaultRouteMayBeIPv6Only() throws {
        let directory = TemporaryDirectory.make()
        let routes = directory + "/route"
        try "Iface\tDestination\tGateway\tFlags\nwlan0\t0000A8C0\t00000000\t0001\n"
            .write(toFile: routes, atomically: true, encoding: .utf8)
        let zeros = String(repeating: "0", count: 32)
        let routes6 = directory + "/ipv6_route"
        try """
        \(zeros) 00 \(zeros) 00 \(zeros) ffffffff 00000001 00000000 00200200       lo
        fd000000000000000000000000000000 40 \(zeros) 00 \(zeros) 00000100 00000001 00000000 00000001    wlan0
        \(zeros) 00 \(zeros) 00 fe800000000000000000000000000001 00000400 00000003 00000000 00000003    wlan0

        """.write(toFile: routes6, atomically: true, encoding: .utf8)
        #expect(NetworkManagerMetered(nmcli: nil, routes: routes, routes6: routes6).defaultDevice() == "wlan0")
        #expect(NetworkManagerMetered(nmcli: nil, routes: routes).defaultDevice() == nil)
        try "\(zeros) 00 \(zeros) 00 \(zeros) ffffffff 00000001 00000000 00200200       lo\n"
            .write(toFile: routes6, atomically: true, encoding: .utf8)
        #expect(NetworkManagerMetered(nmcli: nil, routes: routes, routes6: routes6).defaultDevice() == nil)
    }
}
