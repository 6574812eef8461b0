import BackgroundModel
import Foundation

extension FetchPolicy {
    /// Holds or thins a wake by the machine's conditions (through the `ConditionGate` every kind
    /// of work shares).
    ///
    /// Without a network a fetch cannot succeed, and on a low, discharging battery every wake-up
    /// costs the user (iOS stops background refresh in Low Power Mode): wakes wait, and the daemon
    /// plans again when the conditions change. On battery or on a metered network, wakes that serve
    /// a likely open still come — that is what the user sees — but the others (interval wakes, the
    /// rare wakes of unused apps) come half as often for each, by adding their spacing again.
    func applying(_ conditions: DeviceConditions, to decision: WakeDecision) -> WakeDecision {
        guard let due = decision.dueAt else { return decision }
        var decision = decision
        let gate = ConditionGate(lowBatteryLevel: configuration.lowBatteryLevel)
        switch gate.hold(WorkNeeds(network: .any, waitsOnLowBattery: true), under: conditions) {
        case .noNetwork:
            decision.dueAt = nil
            decision.reasons.append(
                DecisionReason(.noNetwork, "no network is up; the wake due at \(WireCoding.format(due)) waits for one"))
            return decision
        case .lowBattery(let level):
            decision.dueAt = nil
            decision.reasons.append(
                DecisionReason(
                    .lowBattery,
                    "battery at \(level)% and discharging (low is \(configuration.lowBatteryLevel)% or less); the wake due at \(WireCoding.format(due)) waits for power"
                ))
            return decision
        case .meteredNetwork, .noExternalPower, nil:
            break  // a fetch needs neither; a metered network thins it out below
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
