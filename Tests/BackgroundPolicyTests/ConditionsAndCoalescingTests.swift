import BackgroundModel
import BackgroundPolicy
import Foundation
import Testing

/// The policy under the machine's conditions, across apps (coalescing), and learning from answers.
struct ConditionsPolicyTests {
    let policy = FetchPolicy(configuration: .init(systemFloor: .seconds(15 * 60), coalescingLeeway: .zero))
    /// Monday 2026-01-05 00:00 UTC.
    let monday = Date(timeIntervalSince1970: 1_767_571_200)
    func minutes(_ m: Double) -> Date { monday.addingTimeInterval(m * 60) }

    func candidate(
        _ id: String = "com.example.a", interval: FetchInterval = .minimum, lastRun: Double = 0
    ) -> FetchCandidate {
        FetchCandidate(
            app: AppID(rawValue: id)!, interval: interval, registeredAt: minutes(-1000),
            recentRuns: [.init(startedAt: minutes(lastRun), outcome: .newData)])
    }

    func decision(_ conditions: DeviceConditions, candidate: FetchCandidate? = nil, now: Double = 1) -> WakeDecision {
        policy.plan(for: [candidate ?? self.candidate()], runningCount: 0, conditions: conditions, now: minutes(now))
            .decisions[0]
    }

    @Test func withoutANetworkNothingIsWoken() {
        let held = policy.plan(
            for: [candidate()], runningCount: 0, conditions: .init(power: .mains, network: .none), now: minutes(20))
        #expect(held.launch.isEmpty)
        #expect(held.decisions[0].dueAt == nil)
        #expect(held.decisions[0].reasons.last?.code == .noNetwork)
        // Nothing to wait for on the clock: bgd replans when the conditions change.
        #expect(held.nextEvaluation == nil)
    }

    @Test(arguments: [(15, true), (20, true), (21, false)])
    func aLowDischargingBatteryHoldsEveryWake(level: Int, held: Bool) {
        let decision = decision(.init(power: .battery, batteryLevel: level, network: .unmetered))
        #expect((decision.dueAt == nil) == held)
        #expect(decision.reasons.contains { $0.code == .lowBattery } == held)
    }

    @Test func aLowBatteryThatIsChargingHoldsNothing() {
        let decision = decision(.init(power: .mains, batteryLevel: 5, network: .unmetered))
        #expect(decision.dueAt == minutes(15))
        #expect(!decision.reasons.contains { $0.code == .lowBattery })
    }

    @Test func onBatteryOrMeteredIntervalWakesComeHalfAsOften() {
        #expect(decision(.unconstrained).dueAt == minutes(15))
        let battery = decision(.init(power: .battery, batteryLevel: 80, network: .unmetered))
        #expect(battery.dueAt == minutes(30))
        #expect(battery.reasons.last?.code == .onBattery)
        let metered = decision(.init(power: .mains, network: .metered))
        #expect(metered.dueAt == minutes(30))
        #expect(metered.reasons.last?.code == .meteredNetwork)
        let both = decision(.init(power: .battery, batteryLevel: 80, network: .metered))
        #expect(both.dueAt == minutes(45))
    }

    /// An app opened every day at noon: on battery its wake before noon still comes, at the
    /// same time, because that wake is the one the user sees.
    @Test func onBatteryAWakeForALikelyOpenStillComes() {
        var learner = UsageLearner()
        for day in 0..<14 { learner.recordOpen(of: "com.example.a", at: minutes(Double(day) * 1440 + 720)) }
        let now = minutes(14 * 1440 + 700)
        learner.advance(to: now)
        let planner = AdaptiveWakePlanner()
        let outlook = UsageOutlook(learner: learner, planner: planner, threshold: 0.3)
        let candidate = candidate(lastRun: 13 * 1440 + 720)
        let plugged = policy.plan(for: [candidate], runningCount: 0, usage: outlook, now: now).decisions[0]
        let onBattery = policy.plan(
            for: [candidate], runningCount: 0, usage: outlook,
            conditions: .init(power: .battery, batteryLevel: 60, network: .metered),
            now: now
        ).decisions[0]
        #expect(plugged.reasons.contains { $0.code == .predictedOpen }, "\(plugged.reasons)")
        #expect(onBattery.dueAt == plugged.dueAt)
        #expect(!onBattery.reasons.contains { $0.code == .onBattery || $0.code == .meteredNetwork })
    }

    /// `bgctl simulate fetch` is a debugging aid (issue 18): runs the operator asked for spend none
    /// of the wakes the app's use earns, so the same runs that exhaust the budget when scheduled
    /// leave the wake before the likely open in place when they were manual.
    @Test func manualRunsSpendNoneOfTheDailyWakeBudget() throws {
        var learner = UsageLearner()
        for day in 0..<14 { learner.recordOpen(of: "com.example.a", at: minutes(Double(day) * 1440 + 720)) }
        let now = minutes(14 * 1440 + 600)
        learner.advance(to: now)
        let outlook = UsageOutlook(learner: learner, planner: AdaptiveWakePlanner(), threshold: 0.3)
        let cap = try #require(outlook.dailyWakeBudget(for: AppID(rawValue: "com.example.a")!, now: now))
        #expect(cap > 0)
        func decision(manual: Bool) -> WakeDecision {
            // `cap` runs between 23 and 20 hours ago: the content is stale either way.
            let runs = (0..<cap).map { index in
                FetchCandidate.FinishedRun(
                    startedAt: now.addingTimeInterval(-20 * 3600 - Double(index) * 600), outcome: .newData,
                    manual: manual)
            }
            let candidate = FetchCandidate(
                app: AppID(rawValue: "com.example.a")!, interval: .minimum, registeredAt: minutes(-1000),
                recentRuns: runs)
            return policy.plan(for: [candidate], runningCount: 0, usage: outlook, now: now).decisions[0]
        }
        let scheduled = decision(manual: false)
        #expect(scheduled.reasons.contains { $0.code == .dailyBudgetSpent }, "\(scheduled.reasons)")
        let manual = decision(manual: true)
        #expect(!manual.reasons.contains { $0.code == .dailyBudgetSpent }, "\(manual.reasons)")
        #expect(manual.reasons.contains { $0.code == .predictedOpen }, "\(manual.reasons)")
    }
}

struct CoalescingTests {
    let monday = Date(timeIntervalSince1970: 1_767_571_200)
    func minutes(_ m: Double) -> Date { monday.addingTimeInterval(m * 60) }

    func candidate(_ id: String, every interval: Double) -> FetchCandidate {
        FetchCandidate(
            app: AppID(rawValue: id)!, interval: .every(.seconds(interval * 60)), registeredAt: monday,
            recentRuns: [.init(startedAt: monday, outcome: .newData)])
    }

    func policy(leeway: Double) -> FetchPolicy {
        FetchPolicy(configuration: .init(coalescingLeeway: .seconds(leeway * 60)))
    }

    @Test func wakesWithinTheLeewayShareOneWakeUp() {
        let candidates = [
            candidate("com.example.a", every: 30), candidate("com.example.b", every: 33),
            candidate("com.example.c", every: 40),
        ]
        let policy = policy(leeway: 5)
        let early = policy.plan(for: candidates, runningCount: 0, now: minutes(1))
        // a waits for b; c, ten minutes after a, is a wake-up of its own.
        #expect(early.nextEvaluation == minutes(33))
        #expect(early.decision(for: AppID(rawValue: "com.example.a")!)?.dueAt == minutes(33))
        #expect(early.decision(for: AppID(rawValue: "com.example.a")!)?.reasons.last?.code == .coalesced)
        #expect(early.decision(for: AppID(rawValue: "com.example.c")!)?.dueAt == minutes(40))
        // At a's own due time nothing starts; at b's, both do.
        #expect(policy.plan(for: candidates, runningCount: 0, now: minutes(30)).launch.isEmpty)
        let together = policy.plan(for: candidates, runningCount: 0, now: minutes(33))
        #expect(together.launch.map(\.rawValue) == ["com.example.a", "com.example.b"])
    }

    @Test func aLoneWakeAndAZeroLeewayAreNotHeld() {
        let candidates = [candidate("com.example.a", every: 30), candidate("com.example.b", every: 33)]
        #expect(
            policy(leeway: 0).plan(for: candidates, runningCount: 0, now: minutes(30)).launch.map(\.rawValue) == [
                "com.example.a"
            ])
        #expect(
            policy(leeway: 2).plan(for: candidates, runningCount: 0, now: minutes(30)).launch.map(\.rawValue) == [
                "com.example.a"
            ])
        let alone = policy(leeway: 5).plan(
            for: [candidate("com.example.a", every: 30)], runningCount: 0, now: minutes(30))
        #expect(alone.launch.map(\.rawValue) == ["com.example.a"])
    }

    /// Two hundred apps sharing a wake-up: each reason names three and counts the rest, so its
    /// length does not grow with the number of apps (it did: the app listing grew with its square).
    @Test func aSharedWakeUpsReasonStaysShort() {
        let candidates = (0..<200).map { candidate("com.example.app\($0)", every: 30 + Double($0) / 100) }
        let plan = policy(leeway: 5).plan(for: candidates, runningCount: 0, now: minutes(1))
        let reasons = plan.decisions.flatMap(\.reasons).filter { $0.code == .coalesced }
        #expect(reasons.count == 199)
        #expect(
            reasons.allSatisfy { $0.detail.count < 200 && $0.detail.contains("and 196 other apps") },
            "\(reasons.first?.detail ?? "")")
    }

    /// Held wakes (no network) take no part: they must not hold the others.
    @Test func heldWakesDoNotCoalesce() {
        let candidates = [candidate("com.example.a", every: 30), candidate("com.example.b", every: 33)]
        let plan = policy(leeway: 5).plan(
            for: candidates, runningCount: 0, conditions: .init(power: .mains, network: .none), now: minutes(30))
        #expect(plan.launch.isEmpty)
        #expect(!plan.decisions.flatMap(\.reasons).contains { $0.code == .coalesced })
    }
}

struct FetchYieldTests {
    let monday = Date(timeIntervalSince1970: 1_767_571_200)
    func at(day: Int, hour: Double) -> Date { monday.addingTimeInterval(Double(day) * 86400 + hour * 3600) }

    /// A feed that is quiet at night: every fetch at 03:xx found nothing, every fetch at noon
    /// found something.
    var answers: [FetchCandidate.Answer] {
        (0..<7).flatMap { day in
            [
                FetchCandidate.Answer(at: at(day: day, hour: 3.2), broughtNewData: false),
                FetchCandidate.Answer(at: at(day: day, hour: 12.2), broughtNewData: true),
            ]
        }
    }

    @Test func learnsWhichHoursBringNothing() {
        let yield = FetchYield()
        let now = at(day: 7, hour: 0)
        let night = yield.estimate(at: at(day: 7, hour: 3.5), answers: answers, now: now)
        let noon = yield.estimate(at: at(day: 7, hour: 12.5), answers: answers, now: now)
        #expect(yield.isLow(night), "\(night)")
        #expect(!yield.isLow(noon), "\(noon)")
        // One answer decides nothing.
        let once = yield.estimate(at: at(day: 7, hour: 3.5), answers: [answers[0]], now: now)
        #expect(!yield.isLow(once))
        // Old evidence fades: seven weeks later the quiet hour is tried again.
        #expect(!yield.isLow(yield.estimate(at: at(day: 56, hour: 3.5), answers: answers, now: at(day: 56, hour: 0))))
    }

    @Test func anIntervalWakeAtAQuietHourIsPutOff() {
        let policy = FetchPolicy(configuration: .init(coalescingLeeway: .zero))
        func candidate(lastRun: Date) -> FetchCandidate {
            FetchCandidate(
                app: AppID(rawValue: "com.example.feed")!, interval: .every(.seconds(3600)), registeredAt: monday,
                recentRuns: [.init(startedAt: lastRun, outcome: .noData)], answers: answers)
        }
        let night = policy.plan(
            for: [candidate(lastRun: at(day: 7, hour: 2.1))], runningCount: 0, now: at(day: 7, hour: 3.1))
        #expect(night.launch.isEmpty)
        #expect(night.decisions[0].dueAt == at(day: 7, hour: 4.1))
        #expect(night.decisions[0].reasons.last?.code == .usuallyNoData, "\(night.decisions[0].reasons)")
        let noon = policy.plan(
            for: [candidate(lastRun: at(day: 7, hour: 11.1))], runningCount: 0, now: at(day: 7, hour: 12.1))
        #expect(noon.launch.map(\.rawValue) == ["com.example.feed"])
    }
}
