import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Logging
import Testing

@testable import BackgroundDaemon

/// The poll reads the conditions again after its interval has really passed. Where the kernel's
/// events are not heard, it is the only way an unplugged charger or a lost network is seen.
/// Before, it slept until a wall-clock time: the clock set back a day put the next reading a day
/// away, and processing tasks that need power ran on battery meanwhile.
struct ConditionsPollTests {
    @Test func theClockSetBackDoesNotPutThePollOff() async throws {
        let sysfs = FakeSysfs()
        try sysfs.laptop(onAC: true, capacity: 90)
        let store = try BackgroundStore.inMemory()
        let monitor = try await ConditionsMonitor(
            configuration: .init(sensing: .sysfs(root: sysfs.root), kernelEvents: false),
            store: store, doorbells: [], logger: Logger(label: "test"))
        let clock = ManualClock()
        let poller = ConditionsMonitor.Poller(
            monitor: monitor, clock: clock,
            configuration: .init(sensing: .sysfs(root: sysfs.root), kernelEvents: false, pollInterval: .seconds(60)),
            logger: Logger(label: "test"))
        let polling = Task { try await poller.run() }
        defer { polling.cancel() }
        #expect(await eventually { clock.sleeperCount == 1 })  // the poll waits for its interval

        clock.jump(by: .seconds(-86_400))
        try sysfs.write(["class/power_supply/AC/online": "0", "class/power_supply/BAT0/status": "Discharging"])
        clock.advance(by: .seconds(60))
        #expect(await eventuallyAsync { await monitor.effective.power == .battery })
    }
}
