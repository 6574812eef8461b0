import BackgroundModel
import BackgroundPolicy
import Foundation
import Testing

/// When a transfer attempts, waits or fails: the table `TransferService` carries out.
struct TransferPolicyTests {
    let policy = TransferPolicy(noProgressTimeout: .seconds(3600), maximumConcurrent: 2)
    let start = Date(timeIntervalSince1970: 1_767_571_200)
    let online = DeviceConditions(power: .mains, network: .unmetered)
    func at(_ seconds: Double) -> Date { start.addingTimeInterval(seconds) }

    func snapshot(
        _ request: TransferRequest = TransferRequest(session: "s", url: URL(string: "http://127.0.0.1/f")!),
        lastProgress: Double = 0, attempts: Int = 0, nextAttempt: Double? = nil, held: Double? = nil,
        silentFor: Duration = .zero
    ) -> TransferPolicy.Snapshot {
        TransferPolicy.Snapshot(
            request: request, createdAt: start, lastProgressAt: at(lastProgress), attempts: attempts,
            nextAttemptAt: nextAttempt.map(at), heldUntil: held.map(at), silentFor: silentFor, lastError: "HTTP 503")
    }

    @Test func aFreshTransferAttemptsAndIsLookedAtAgainByItsTimeouts() {
        let decision = policy.decide(snapshot(), conditions: online, attemptsRunning: 0, now: at(1))
        #expect(decision.action == .attempt)
        // The no-progress check (an hour of silence) comes before the 7-day resource timeout.
        #expect(decision.lookAgainAt == at(3601))
    }

    /// A transfer that has made no attempt, held past the no-progress timeout (its begin date
    /// ahead, or a discretionary one on battery), is not failed, and is not looked at again at
    /// once. Before, its look-again time was `now`: the service planned again without a pause,
    /// a core busy for as long as it was held.
    @Test(arguments: [false, true])
    func oneHeldPastTheTimeoutBeforeAnyAttemptIsNotLookedAtAgainAtOnce(onBattery: Bool) {
        let request = TransferRequest(session: "s", url: URL(string: "http://127.0.0.1/f")!, isDiscretionary: true)
        let now = at(2 * 86400)
        let held = policy.decide(
            snapshot(request, nextAttempt: onBattery ? nil : 3 * 86400, silentFor: .seconds(2 * 86400)),
            conditions: onBattery ? DeviceConditions(power: .battery, batteryLevel: 60, network: .unmetered) : online,
            attemptsRunning: 0, now: now)
        let isHeld = if case .hold = held.action { true } else { false }
        #expect(onBattery ? isHeld : held.action == .waitForRetry, "\(held)")
        #expect(held.lookAgainAt.map { $0 > now } ?? true, "\(String(describing: held.lookAgainAt))")
    }

    /// With no network, a transfer that waits for connectivity is held; one that does not (a
    /// download someone watches at a terminal) fails at once, as curl would.
    @Test(arguments: [true, false])
    func noNetworkHoldsOrFailsAsTheRequestAsks(waits: Bool) {
        let request = TransferRequest(
            session: "s", url: URL(string: "http://127.0.0.1/f")!, waitsForConnectivity: waits)
        let offline = DeviceConditions(power: .mains, network: .none)
        let decision = policy.decide(snapshot(request), conditions: offline, attemptsRunning: 0, now: at(1))
        switch decision.action {
        case .hold(let reason): #expect(waits && reason.code == .noNetwork)
        case .fail(let error): #expect(!waits && error.code == .cannotConnect)
        default: Issue.record("\(decision)")
        }
    }

    @Test func pastItsResourceTimeoutItFails() {
        let request = TransferRequest(
            session: "s", url: URL(string: "http://127.0.0.1/f")!, timeoutForResource: .seconds(60))
        let decision = policy.decide(snapshot(request), conditions: online, attemptsRunning: 0, now: at(60))
        guard case .fail(let error) = decision.action else { Issue.record("not failed: \(decision)"); return }
        #expect(error.code == .timedOut)
    }

    /// Silent for the timeout by the date and by time that really passed — and only once it tried.
    @Test(arguments: [
        (3600.0, 1, Duration.seconds(3600), true),
        (3600.0, 0, Duration.seconds(3600), false),  // never attempted: nothing could progress
        (3600.0, 1, Duration.seconds(10), false),  // the wall clock jumped; little time really passed
        (100.0, 1, Duration.seconds(3600), false),
    ])
    func noProgressFailsOnlyWhenBothClocksAgree(now: Double, attempts: Int, silentFor: Duration, fails: Bool) {
        let decision = policy.decide(
            snapshot(attempts: attempts, silentFor: silentFor), conditions: online, attemptsRunning: 0, now: at(now))
        if case .fail(let error) = decision.action {
            #expect(fails)
            #expect(error.code == .noProgress)
            #expect(error.message.contains("HTTP 503"))
        } else {
            #expect(!fails)
        }
    }

    @Test func aRetryTimeWaitsAndAHeldRetryOverridesTheStoredOne() {
        let waiting = policy.decide(snapshot(nextAttempt: 30), conditions: online, attemptsRunning: 0, now: at(1))
        #expect(waiting.action == .waitForRetry)
        #expect(waiting.lookAgainAt == at(30))
        let held = policy.decide(
            snapshot(nextAttempt: 30, held: 90), conditions: online, attemptsRunning: 0, now: at(1))
        #expect(held.lookAgainAt == at(90))
        let due = policy.decide(snapshot(nextAttempt: 30), conditions: online, attemptsRunning: 0, now: at(30))
        #expect(due.action == .attempt)
        // The held retry has come (its time really passed) though the stored one, written
        // before the clock was set back a day, lies ahead: it goes.
        let cameOnTime = policy.decide(
            snapshot(nextAttempt: 86_400, held: 0), conditions: online, attemptsRunning: 0, now: at(1))
        #expect(cameOnTime.action == .attempt)
    }

    /// After a restart only the stored retry time is known. One further ahead than any retry is
    /// ever given was written before the clock was set back: due now, not when the clock catches up.
    @Test func aStoredRetryFurtherAheadThanAnyIsDue() {
        let policy = TransferPolicy(
            noProgressTimeout: .seconds(3600), maximumConcurrent: 2, longestRetryWait: .seconds(600))
        let within = policy.decide(snapshot(nextAttempt: 601), conditions: online, attemptsRunning: 0, now: at(1))
        #expect(within.action == .waitForRetry && within.lookAgainAt == at(601))
        let beyond = policy.decide(
            snapshot(attempts: 1, nextAttempt: 86_400), conditions: online, attemptsRunning: 0, now: at(1))
        #expect(beyond.action == .attempt)
        // Before any attempt the stored time is the app's earliestBegin: a week ahead is a week.
        let notBefore = policy.decide(
            snapshot(nextAttempt: 7 * 86_400), conditions: online, attemptsRunning: 0, now: at(1))
        #expect(notBefore.action == .waitForRetry)
    }

    @Test(arguments: [
        // (discretionary, allowsExpensive, power, network, held by)
        (false, true, DeviceConditions.PowerSource.mains, DeviceConditions.Network.none, ReasonCode?.some(.noNetwork)),
        (false, true, .mains, .metered, nil),
        (false, false, .mains, .metered, .meteredNetwork),
        (true, true, .mains, .metered, .meteredNetwork),
        (true, true, .battery, .unmetered, .needsExternalPower),
        (false, true, .battery, .unmetered, nil),
    ])
    func conditionsHoldWhatTheTransferNeeds(
        discretionary: Bool, expensive: Bool, power: DeviceConditions.PowerSource, network: DeviceConditions.Network,
        heldBy: ReasonCode?
    ) {
        let request = TransferRequest(
            session: "s", url: URL(string: "http://127.0.0.1/f")!, isDiscretionary: discretionary,
            allowsExpensiveNetworkAccess: expensive)
        let decision = policy.decide(
            snapshot(request), conditions: DeviceConditions(power: power, batteryLevel: 50, network: network),
            attemptsRunning: 0, now: at(1))
        if case .hold(let reason) = decision.action {
            #expect(reason.code == heldBy)
        } else {
            #expect(heldBy == nil, "\(decision.action)")
        }
    }

    /// A transfer the user asked for is not a wake the system chose: a low battery does not hold it.
    @Test func aLowBatteryHoldsNoTransferTheUserAskedFor() {
        let low = DeviceConditions(power: .battery, batteryLevel: 5, network: .unmetered)
        #expect(policy.decide(snapshot(), conditions: low, attemptsRunning: 0, now: at(1)).action == .attempt)
    }

    @Test func theConcurrencyLimitHoldsTheRest() {
        let decision = policy.decide(snapshot(), conditions: online, attemptsRunning: 2, now: at(1))
        #expect(decision.action == .hold(DecisionReason(.concurrencyLimit, "waiting for one of 2 transfers to finish")))
    }
}

/// The one gate fetches, tasks and transfers share: the same conditions mean the same for all.
struct ConditionGateTests {
    let gate = ConditionGate(lowBatteryLevel: 20)

    @Test(arguments: [
        (WorkNeeds(network: .any), DeviceConditions(power: .mains, network: .none), ConditionHold?.some(.noNetwork)),
        (WorkNeeds(network: .none), DeviceConditions(power: .mains, network: .none), nil),
        (WorkNeeds(network: .unmetered), DeviceConditions(power: .mains, network: .metered), .meteredNetwork),
        (WorkNeeds(network: .any), DeviceConditions(power: .mains, network: .metered), nil),
        (
            WorkNeeds(network: .any, externalPower: true), DeviceConditions(power: .battery, network: .none),
            .noExternalPower
        ),
        (
            WorkNeeds(network: .any, waitsOnLowBattery: true),
            DeviceConditions(power: .battery, batteryLevel: 20, network: .unmetered), .lowBattery(level: 20)
        ),
        (
            WorkNeeds(network: .any, waitsOnLowBattery: true),
            DeviceConditions(power: .battery, batteryLevel: 21, network: .unmetered), nil
        ),
        (WorkNeeds(network: .any), DeviceConditions(power: .battery, batteryLevel: 5, network: .unmetered), nil),
    ])
    func holds(needs: WorkNeeds, conditions: DeviceConditions, expected: ConditionHold?) {
        #expect(gate.hold(needs, under: conditions) == expected)
    }
}
