import BackgroundModel
import Foundation

/// When `BGTaskScheduler` requests run. Processing tasks get minutes, so they wait for a quiet
/// device: not before their earliest begin date, only with the network and power they ask for,
/// and only while no app is in the foreground; they are stopped when any of that stops holding.
/// App refresh requests only wait for their date here — their wake is the adaptive fetch
/// policy's (`FetchCandidate.notBefore`). Pure.
public struct ProcessingTaskPolicy: Hashable, Sendable {
    /// How long a processing task may run.
    public var budget: Duration
    /// How many processing tasks run at once. Each holds minutes of CPU, disk and network: thirty
    /// apps' power-hungry work started together the moment a laptop is plugged in would slow
    /// the machine, starve one another, and hold the fetch planner's run slots for ten minutes.
    public var maximumRunning: Int

    public init(budget: Duration = .seconds(600), maximumRunning: Int = 2) {
        self.budget = budget
        self.maximumRunning = maximumRunning
    }

    /// How many more processing tasks may start while `running` run (tasks of other kinds do
    /// not count).
    public func freeSlots(among running: [RunningTask]) -> Int {
        max(0, maximumRunning - running.filter { $0.kind == .processing }.count)
    }

    /// Why a request that may start waits all the same: the others running hold every slot.
    public var slotReason: DecisionReason {
        DecisionReason(
            .concurrencyLimit,
            "\(maximumRunning) processing tasks run already, the most at once; it starts when one ends")
    }

    /// Why `request` cannot start at `now` (nil: it may).
    public func waitingReason(
        for request: TaskRequest, conditions: DeviceConditions, appInForeground: AppID?, now: Date
    ) -> DecisionReason? {
        if let earliest = request.earliestBeginDate, earliest > now {
            return DecisionReason(.taskNotYetDue, "its earliest begin date is \(WireCoding.formatSeconds(earliest))")
        }
        guard request.kind == .processing else { return nil }
        return conditionProblem(for: request, conditions: conditions, appInForeground: appInForeground)
    }

    /// Why a running processing task must stop now (nil: it may go on).
    public func stopReason(
        for request: TaskRequest, conditions: DeviceConditions, appInForeground: AppID?
    ) -> DecisionReason? {
        guard request.kind == .processing else { return nil }
        return conditionProblem(for: request, conditions: conditions, appInForeground: appInForeground)
    }

    /// The soonest time a waiting request's date comes (to look again then).
    public func nextCheck(for requests: [TaskRequest], now: Date) -> Date? {
        requests.compactMap(\.earliestBeginDate).filter { $0 > now }.min()
    }

    private func conditionProblem(
        for request: TaskRequest, conditions: DeviceConditions, appInForeground: AppID?
    ) -> DecisionReason? {
        let needs = WorkNeeds(
            network: request.requiresNetworkConnectivity ? .any : .none, externalPower: request.requiresExternalPower)
        switch ConditionGate().hold(needs, under: conditions) {
        case .noExternalPower:
            return DecisionReason(.needsExternalPower, "it requires external power; the device is on battery")
        case .noNetwork:
            return DecisionReason(.needsNetwork, "it requires a network; none is up")
        case .meteredNetwork, .lowBattery, nil:
            break  // not asked for: a processing task says what it needs
        }
        if let appInForeground {
            return DecisionReason(
                .appInForeground, "\(appInForeground) is in the foreground; processing waits until the device is idle")
        }
        return nil
    }
}
