import BackgroundModel
import Foundation

extension FetchPolicy {
    /// Holds or thins a wake by the machine's conditions.
    ///
    /// Without a network a fetch cannot succeed, and on a low, discharging battery every wake-up
    /// costs the user (iOS stops background refresh in Low Power Mode): wakes wait, and the daemon
    /// plans again when the conditions change. On battery or on a metered network, wakes that serve
    /// a likely open still come — that is what the user sees — but the others (interval wakes, the
    /// rare wakes of unused apps) come half as often for each, by adding their spacing again.
    func applying(_ conditions: DeviceConditions, to decision: WakeDecision) -> WakeDecision {
        guard let due = decision.dueAt else { return decision }
        var decision = decision
        if conditions.network == .none {
            decision.dueAt = nil
            decision.reasons.append(
                DecisionReason(.noNetwork, "no network is up; the wake due at \(WireCoding.format(due)) waits for one"))
            return decision
        }
        if conditions.power == .battery, let level = conditions.batteryLevel, level <= configuration.lowBatteryLevel {
            decision.dueAt = nil
            decision.reasons.append(
                DecisionReason(
                    .lowBattery,
                    "battery at \(level)% and discharging (low is \(configuration.lowBatteryLevel)% or less); the wake due at \(WireCoding.format(due)) waits for power"
                ))
            return decision
        }
        guard let spacing = decision.spacing, !decision.reasons.contains(where: { $0.code == .predictedOpen }) else {
            return decision
        }
        var thinned = due
        if conditions.power == .battery {
            thinned = thinned.adding(spacing)
            decision.reasons.append(
                DecisionReason(
                    .onBattery,
                    "on battery: wakes not tied to a likely open come half as often (\(spacing.humanDescription) later)"
                ))
        }
        if conditions.network == .metered {
            thinned = thinned.adding(spacing)
            decision.reasons.append(
                DecisionReason(
                    .meteredNetwork,
                    "the network is metered: wakes not tied to a likely open come half as often (\(spacing.humanDescription) later)"
                ))
        }
        decision.dueAt = thinned
        return decision
    }
}
