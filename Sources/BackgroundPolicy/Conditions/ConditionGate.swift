import BackgroundModel

/// What a piece of background work needs of the machine before it may go.
public struct WorkNeeds: Hashable, Sendable {
    public enum Network: Hashable, Sendable {
        /// Goes without one.
        case none
        /// Any network that is up.
        case any
        /// Only a network the user does not pay for by the byte.
        case unmetered
    }
    public var network: Network
    /// Only on mains power (a processing task that asks, a discretionary transfer).
    public var externalPower: Bool
    /// Waits while the battery is low and discharging (iOS stops background refresh in Low
    /// Power Mode); work the user asked for goes on.
    public var waitsOnLowBattery: Bool

    public init(network: Network, externalPower: Bool = false, waitsOnLowBattery: Bool = false) {
        self.network = network
        self.externalPower = externalPower
        self.waitsOnLowBattery = waitsOnLowBattery
    }
}

/// Why the machine's conditions hold work back: the first need they do not meet.
public enum ConditionHold: Hashable, Sendable {
    case noNetwork
    case meteredNetwork
    case noExternalPower
    case lowBattery(level: Int)

    /// The code this hold shows under in `bgctl why`, `bgctl tasks` and transfers.
    public var code: ReasonCode {
        switch self {
        case .noNetwork: .noNetwork
        case .meteredNetwork: .meteredNetwork
        case .noExternalPower: .needsExternalPower
        case .lowBattery: .lowBattery
        }
    }
}

/// The one gate every kind of background work passes — scheduled fetches, processing tasks,
/// transfers — so that "no network", "on battery" and "low battery" mean the same for all.
/// Each kind says what it needs; the gate says what holds it back, in that order: power, then
/// network, then a low battery. Pure.
public struct ConditionGate: Hashable, Sendable {
    /// At or below this percentage, discharging, the battery is low.
    public var lowBatteryLevel: Int

    public init(lowBatteryLevel: Int = 20) {
        self.lowBatteryLevel = lowBatteryLevel
    }

    public func hold(_ needs: WorkNeeds, under conditions: DeviceConditions) -> ConditionHold? {
        if needs.externalPower, conditions.power != .mains { return .noExternalPower }
        switch needs.network {
        case .none: break
        case .any: if conditions.network == .none { return .noNetwork }
        case .unmetered:
            if conditions.network == .none { return .noNetwork }
            if conditions.network == .metered { return .meteredNetwork }
        }
        if needs.waitsOnLowBattery, isLowBattery(conditions) { return .lowBattery(level: conditions.batteryLevel ?? 0) }
        return nil
    }

    public func isLowBattery(_ conditions: DeviceConditions) -> Bool {
        guard conditions.power == .battery, let level = conditions.batteryLevel else { return false }
        return level <= lowBatteryLevel
    }
}
