import BackgroundModel
import BackgroundStore
import Foundation
import Logging
import ServiceLifecycle

/// Keeps the machine's conditions current: senses them every `pollInterval` (sysfs has no change
/// notification for these files), lays the operator's stored overrides over them, and rings the
/// scheduler when what the policy sees changes.
public actor ConditionsMonitor {
    public enum Sensing: Sendable {
        /// Read from this sysfs root ("/sys").
        case sysfs(root: String)
        /// Assume these conditions (tests; machines whose sysfs says nothing useful).
        case fixed(DeviceConditions)
    }

    public struct Configuration: Sendable {
        public var sensing: Sensing
        public var pollInterval: Duration

        public init(sensing: Sensing = .sysfs(root: "/sys"), pollInterval: Duration = .seconds(60)) {
            self.sensing = sensing
            self.pollInterval = pollInterval
        }
    }

    private let configuration: Configuration
    private let store: BackgroundStore
    /// Rung when the effective conditions change: the scheduler's and the transfers'.
    private let doorbells: [Doorbell]
    private let logger: Logger
    private var sensed: DeviceConditions
    private var sources: [String]
    private var overrides: ConditionOverrides

    init(configuration: Configuration, store: BackgroundStore, doorbells: [Doorbell], logger: Logger) async throws {
        self.configuration = configuration
        self.store = store
        self.doorbells = doorbells
        self.logger = logger
        (sensed, sources) = Self.sense(configuration.sensing)
        overrides = try await store.conditionOverrides()
    }

    /// What the fetch policy plans with.
    public var effective: DeviceConditions { sensed.applying(overrides) }

    public var report: ConditionsReport { ConditionsReport(sensed: sensed, sources: sources, overrides: overrides) }

    /// Stores the operator's overrides (they survive a restart) and replans.
    public func setOverrides(_ new: ConditionOverrides) async throws {
        try await store.setConditionOverrides(new)
        let before = effective
        overrides = new
        announce(from: before)
    }

    /// Senses again now.
    public func refresh() {
        let before = effective
        (sensed, sources) = Self.sense(configuration.sensing)
        announce(from: before)
    }

    private func announce(from before: DeviceConditions) {
        guard effective != before else { return }
        logger.notice("Conditions changed", metadata: ["from": "\(before)", "to": "\(effective)"])
        for doorbell in doorbells { doorbell.ring() }
    }

    private static func sense(_ sensing: Sensing) -> (DeviceConditions, [String]) {
        switch sensing {
        case .sysfs(let root): SysfsConditions(root: root).read()
        case .fixed(let conditions): (conditions, ["fixed by bgd's configuration"])
        }
    }

    /// The polling loop, as a service of the daemon.
    struct Poller: Service {
        let monitor: ConditionsMonitor
        let clock: any WallClock
        let interval: Duration

        func run() async throws {
            do {
                try await cancelWhenGracefulShutdown {
                    while !Task.isCancelled {
                        try await clock.sleep(until: clock.now.adding(interval))
                        await monitor.refresh()
                    }
                }
            } catch is CancellationError {
                return
            }
        }
    }
}
