/// What the machine can afford right now: its power and its network. The fetch policy holds or
/// thins wakes by them, as iOS does in Low Power Mode and WorkManager does with its constraints.
public struct DeviceConditions: Hashable, Codable, Sendable, CustomStringConvertible {
    public enum PowerSource: String, Hashable, Codable, Sendable, CaseIterable {
        /// Mains, USB, or a battery that is charging or full: power is not scarce.
        case mains
        /// Running on a discharging battery.
        case battery
    }

    public enum Network: String, Hashable, Codable, Sendable, CaseIterable {
        /// No interface other than loopback is up.
        case none
        /// Up on an interface the user pays for by the byte (a cellular modem).
        case metered
        /// Up on an interface that is not metered.
        case unmetered
    }

    public var power: PowerSource
    /// Percent, 0…100; nil when the machine has no battery.
    public var batteryLevel: Int?
    public var network: Network

    public init(power: PowerSource, batteryLevel: Int? = nil, network: Network) {
        self.power = power
        self.batteryLevel = batteryLevel.map { min(100, max(0, $0)) }
        self.network = network
    }

    /// A plugged-in machine on an unmetered network: nothing held back.
    public static let unconstrained = DeviceConditions(power: .mains, network: .unmetered)

    public var description: String {
        let battery = batteryLevel.map { ", battery \($0)%" } ?? ""
        return "power \(power.rawValue)\(battery), network \(network.rawValue)"
    }

    /// These conditions with the operator's overrides laid over them.
    public func applying(_ overrides: ConditionOverrides) -> DeviceConditions {
        DeviceConditions(
            power: overrides.power ?? power, batteryLevel: overrides.batteryLevel ?? batteryLevel,
            network: overrides.network ?? network)
    }
}

/// Conditions set by hand (`bgctl env set …`) in place of the sensed ones, for testing how apps
/// behave on battery or without a network. A nil field means "as sensed".
public struct ConditionOverrides: Hashable, Codable, Sendable {
    public var power: DeviceConditions.PowerSource?
    public var batteryLevel: Int?
    public var network: DeviceConditions.Network?

    public init(
        power: DeviceConditions.PowerSource? = nil, batteryLevel: Int? = nil, network: DeviceConditions.Network? = nil
    ) {
        self.power = power
        self.batteryLevel = batteryLevel
        self.network = network
    }

    public var isEmpty: Bool { power == nil && batteryLevel == nil && network == nil }

    /// Why these overrides cannot be applied, or nil when they can.
    public var problem: String? {
        if let batteryLevel, !(0...100).contains(batteryLevel) {
            return "batteryLevel must be a percentage from 0 to 100"
        }
        return nil
    }
}

/// The conditions as bgd sees them (`GET /v1/env`): sensed, overridden, and what the policy uses.
public struct ConditionsReport: Hashable, Codable, Sendable {
    public var sensed: DeviceConditions
    /// Where the sensed values came from ("/sys/class/power_supply/BAT0", "fixed by configuration").
    public var sources: [String]
    public var overrides: ConditionOverrides
    public var effective: DeviceConditions

    public init(sensed: DeviceConditions, sources: [String], overrides: ConditionOverrides) {
        self.sensed = sensed
        self.sources = sources
        self.overrides = overrides
        self.effective = sensed.applying(overrides)
    }
}
