import BackgroundModel
import BackgroundStore
import Foundation
import Logging
import QuietThreads
import ServiceLifecycle
import Synchronization

/// Keeps the machine's conditions current: senses them when the kernel says power or network
/// changed (`KernelChangeListener`) and on a long poll besides (a battery's charge may drift
/// without a uevent; sysfs files have no change notification of their own), lays the operator's
/// stored overrides over them, and rings the scheduler when what the policy sees changes.
public actor ConditionsMonitor {
    public enum Sensing: Sendable {
        /// Read from this sysfs root ("/sys").
        case sysfs(root: String)
        /// Assume these conditions (tests; machines whose sysfs says nothing useful).
        case fixed(DeviceConditions)
    }

    public struct Configuration: Sendable {
        public var sensing: Sensing
        /// Whether to listen for the kernel's power and network events (netlink).
        public var kernelEvents: Bool
        /// How often to read again regardless; nil: every 10 minutes while the kernel's events
        /// are heard, every minute where they cannot be (not Linux, netlink refused).
        public var pollInterval: Duration?

        /// Where NetworkManager is asked whether the network is metered (with sysfs sensing).
        public var networkManager: NetworkManagerMetered

        public init(
            sensing: Sensing = .sysfs(root: "/sys"), kernelEvents: Bool = true, pollInterval: Duration? = nil,
            networkManager: NetworkManagerMetered = .system
        ) {
            self.sensing = sensing
            self.kernelEvents = kernelEvents
            self.pollInterval = pollInterval
            self.networkManager = networkManager
        }

        static let pollWithKernelEvents = Duration.seconds(600)
        static let pollWithoutKernelEvents = Duration.seconds(60)
    }

    private let configuration: Configuration
    private let store: BackgroundStore
    /// Rung when the effective conditions change: the scheduler's and the transfers'.
    private let doorbells: [Doorbell]
    /// Rung when the network comes, goes or changes kind: the push relay's uplink.
    private let networkDoorbells: [Doorbell]
    private let logger: Logger
    private var sensed: DeviceConditions
    private var sources: [String]
    private var overrides: ConditionOverrides
    /// NetworkManager's last verdict, and what it was asked for.
    private var metered: MeteredVerdict?

    init(
        configuration: Configuration, store: BackgroundStore, doorbells: [Doorbell], networkDoorbells: [Doorbell] = [],
        logger: Logger
    ) async throws {
        self.configuration = configuration
        self.store = store
        self.doorbells = doorbells
        self.networkDoorbells = networkDoorbells
        self.logger = logger
        (sensed, sources, metered) = try await WorkerThreads.conditions.run { Self.sense(configuration, kept: nil) }
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

    /// Senses again now: on the poll (no `cause`) everything; for a kernel event, NetworkManager
    /// only if the links up or the default route changed. Before, every event asked it (a
    /// process forked), a battery's uevent at each percent and an address's renewal included.
    ///
    /// A verdict NetworkManager did not give (a connection still activating says "unknown") is
    /// asked for again at a network event, not at a battery's: where nmcli is installed but
    /// NetworkManager does not run, each percent of charge forked it.
    ///
    /// Sensing runs on a thread of its own: `nmcli` may take up to its second, and an event-loop
    /// thread waiting on it held up every request it carried.
    public func refresh(because cause: String? = nil) async {
        if let cause { logger.debug("Reading the conditions again", metadata: ["cause": "\(cause)"]) }
        let (configuration, kept) = (self.configuration, cause == nil ? nil : metered)
        let keepUnanswered = cause == KernelChangeListener.cause(ofUevent: "power_supply")
        guard
            let sensing = try? await WorkerThreads.conditions.run({
                Self.sense(configuration, kept: kept, keepUnanswered: keepUnanswered)
            })
        else { return }
        let before = effective
        (sensed, sources, metered) = sensing
        announce(from: before)
    }

    private func announce(from before: DeviceConditions) {
        guard effective != before else { return }
        logger.notice("Conditions changed", metadata: ["from": "\(before)", "to": "\(effective)"])
        for doorbell in doorbells { doorbell.ring() }
        if effective.network != before.network {
            for doorbell in networkDoorbells { doorbell.ring() }
        }
    }

    /// sysfs for power and the network's state; NetworkManager, where it is there, for whether
    /// the network is metered (its word over sysfs's guess from the device type).
    /// With `kept`, NetworkManager's verdict is taken from it when it was given for the same
    /// links up and default route.
    private static func sense(
        _ configuration: Configuration, kept: MeteredVerdict?, keepUnanswered: Bool = false
    ) -> (DeviceConditions, [String], MeteredVerdict?) {
        switch configuration.sensing {
        case .sysfs(let root):
            var (conditions, sources) = SysfsConditions(root: root).read()
            guard conditions.network != .none else { return (conditions, sources, nil) }
            let asked = MeteredVerdict.Question(
                links: sources.filter { $0.contains("/class/net/") },
                device: configuration.networkManager.defaultDevice())
            let verdict =
                kept.flatMap { $0.question == asked && ($0.answer != nil || keepUnanswered) ? $0 : nil }
                ?? MeteredVerdict(question: asked, answer: configuration.networkManager.read())
            if let answer = verdict.answer {
                conditions.network = answer.metered ? .metered : .unmetered
                sources.append(answer.source)
            }
            return (conditions, sources, verdict)
        case .fixed(let conditions):
            return (conditions, ["fixed by bgd's configuration"], nil)
        }
    }

    /// NetworkManager's word on whether the network is metered, and what it was asked for.
    struct MeteredVerdict: Sendable {
        struct Question: Equatable, Sendable {
            var links: [String]
            var device: String?
        }
        var question: Question
        var answer: (metered: Bool, source: String)?
    }

    /// Reads the conditions again when the kernel says something changed, and on the poll.
    struct Poller: Service {
        let monitor: ConditionsMonitor
        let clock: any WallClock
        let configuration: Configuration
        let logger: Logger

        func run() async throws {
            let kernelChanged = Doorbell()
            let causes = Mutex<Set<String>>([])
            let listener =
                configuration.kernelEvents
                ? KernelChangeListener.start { cause in
                    causes.withLock { _ = $0.insert(cause) }
                    kernelChanged.ring()
                } : nil
            defer { listener?.stop() }
            let interval =
                configuration.pollInterval
                ?? (listener == nil ? Configuration.pollWithoutKernelEvents : Configuration.pollWithKernelEvents)
            logger.debug(
                "Watching power and network",
                metadata: ["kernelEvents": "\(listener != nil)", "poll": "\(interval)"])
            do {
                try await cancelWhenGracefulShutdown {
                    while !Task.isCancelled {
                        try await kernelChanged.wait(for: interval, on: clock)
                        let heard = causes.withLock { causes in
                            defer { causes = [] }
                            return causes
                        }
                        await monitor.refresh(because: heard.isEmpty ? nil : heard.sorted().joined(separator: ", "))
                    }
                }
            } catch is CancellationError {
                return
            }
        }
    }
}

extension WorkerThreads {
    /// Where the conditions are read (sysfs, `nmcli`), off the event loops.
    static let conditions = WorkerThreads(count: 1, name: "bgd-conditions")
}
