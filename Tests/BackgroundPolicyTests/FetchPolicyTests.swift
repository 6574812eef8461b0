import BackgroundModel
import BackgroundPolicy
import Foundation
import Testing

struct FetchPolicyTests {
    let policy = FetchPolicy(
        configuration: .init(systemFloor: .seconds(15 * 60), maximumConcurrentRuns: 2, maximumStretch: 32))
    let registered = Date(timeIntervalSince1970: 1_767_603_600)
    let app = AppID(rawValue: "com.example.a")!

    func candidate(
        _ interval: FetchInterval, runs: [(minutesAfterRegistration: Double, RunOutcome)] = [], running: Bool = false,
        id: String = "com.example.a"
    ) -> FetchCandidate {
        FetchCandidate(
            app: AppID(rawValue: id)!, interval: interval, registeredAt: registered,
            recentRuns: runs.map { .init(startedAt: registered.addingTimeInterval($0.0 * 60), outcome: $0.1) }
                .sorted { $0.startedAt > $1.startedAt },
            isRunning: running)
    }

    func minutes(_ m: Double) -> Date { registered.addingTimeInterval(m * 60) }

    @Test func neverIsNeverWoken() {
        let decision = policy.dueDecision(for: candidate(.never), now: minutes(600))
        #expect(decision.dueAt == nil)
        #expect(decision.reasons.map(\.code) == [.fetchDisabled])
    }

    @Test(arguments: [
        // interval, last run start (minutes), expected due (minutes), binding reason
        (FetchInterval.minimum, 0.0, 15.0, ReasonCode.systemFloor),
        (.every(.seconds(60)), 0.0, 15.0, .systemFloor),
        (.every(.seconds(3600)), 10.0, 70.0, .minimumInterval),
    ])
    func dueIsLastRunPlusTheLongerOfIntervalAndFloor(
        interval: FetchInterval, lastRun: Double, expectedDue: Double, reason: ReasonCode
    ) {
        let decision = policy.dueDecision(
            for: candidate(interval, runs: [(lastRun, .newData)]), now: minutes(lastRun + 1))
        #expect(decision.dueAt == minutes(expectedDue))
        #expect(decision.reasons.map(\.code).contains(reason))
    }

    @Test func firstFetchCountsFromRegistration() {
        let decision = policy.dueDecision(for: candidate(.minimum), now: minutes(1))
        #expect(decision.dueAt == minutes(15))
        #expect(decision.reasons.first?.code == .firstFetch)
    }

    @Test(arguments: [(1, 30.0), (2, 60.0), (3, 120.0), (5, 480.0), (9, 480.0)])
    func failuresDoubleTheIntervalUpToTheCap(failures: Int, expectedMinutes: Double) {
        let policy = FetchPolicy(configuration: .init(systemFloor: .seconds(15 * 60), maximumStretch: 32))
        let runs = (0..<failures).map { (Double($0), RunOutcome.failed) }
        let last = Double(failures - 1)
        let decision = policy.dueDecision(for: candidate(.minimum, runs: runs), now: minutes(last))
        #expect(decision.dueAt == minutes(last + expectedMinutes))
        #expect(decision.reasons.map(\.code).contains(.backoffAfterFailure))
    }

    @Test func anOverrunIsPenalisedWithItsOwnReason() {
        let decision = policy.dueDecision(for: candidate(.minimum, runs: [(0, .expired)]), now: minutes(1))
        #expect(decision.dueAt == minutes(30))
        #expect(decision.reasons.map(\.code) == [.systemFloor, .penaltyAfterOverrun])
        #expect(decision.reasons.last?.detail.contains("×2") == true)
    }

    @Test func aGoodAnswerEndsTheStreak() {
        let runs: [(Double, RunOutcome)] = [(0, .failed), (1, .crashed), (2, .noData)]
        let decision = policy.dueDecision(for: candidate(.minimum, runs: runs), now: minutes(3))
        #expect(decision.dueAt == minutes(17))
        #expect(!decision.reasons.map(\.code).contains(.backoffAfterFailure))
    }

    @Test func stretchNeverPassesTheMaximumDelay() {
        let policy = FetchPolicy(
            configuration: .init(systemFloor: .seconds(3600), maximumStretch: 64, maximumDelay: .seconds(6 * 3600)))
        let runs = (0..<6).map { (Double($0), RunOutcome.expired) }
        let decision = policy.dueDecision(for: candidate(.minimum, runs: runs), now: minutes(5))
        #expect(decision.dueAt == minutes(5 + 360))
    }

    @Test func anInterruptedRunIsMadeUpAtOnceButNotForever() {
        let once = policy.dueDecision(
            for: candidate(.minimum, runs: [(0, .newData), (20, .interrupted)]), now: minutes(25))
        #expect(once.dueAt == minutes(20))
        #expect(once.reasons.map(\.code) == [.interruptedRun])
        let thrice = policy.dueDecision(
            for: candidate(.minimum, runs: [(0, .interrupted), (1, .interrupted), (2, .interrupted)]), now: minutes(3))
        #expect(thrice.dueAt == minutes(2 + 15 * 8))
        #expect(thrice.reasons.map(\.code).contains(.backoffAfterFailure))
        // Said as what it was: bgd stopping, not the app failing.
        let said = thrice.reasons.map(\.detail)
        #expect(said.contains { $0.contains("3 recent run(s) were cut short by bgd stopping") }, "\(said)")
        #expect(!said.contains { $0.contains("failed or crashed") }, "\(said)")
    }

    @Test func aRunInFlightIsNotPlanned() {
        let decision = policy.dueDecision(
            for: candidate(.minimum, runs: [(0, .newData)], running: true), now: minutes(60))
        #expect(decision.dueAt == nil)
        #expect(decision.reasons.map(\.code) == [.alreadyRunning])
    }

    /// The wall clock went back a day: the last run seems to lie in the future. The app is due
    /// now, once — counted from now, it was put off by its interval at every pass and not
    /// woken until the clock caught up.
    @Test func aTimeInTheFutureMakesTheAppDueOnce() {
        let now = minutes(-24 * 60)
        let decision = policy.dueDecision(for: candidate(.minimum, runs: [(0, .newData)]), now: now)
        #expect(decision.dueAt == now)
        #expect(decision.reasons.map(\.code).contains(.clockWentBackwards))
        let later = policy.dueDecision(
            for: candidate(.minimum, runs: [(0, .newData)]), now: now.addingTimeInterval(600))
        #expect(later.dueAt == now.addingTimeInterval(600), "still due, not put off again")
        // The run it got is the newest (the store orders runs as started, not by their stamps):
        // from there, as usual.
        let app = AppID(rawValue: "com.example.a")!
        let ranAgain = FetchCandidate(
            app: app, interval: .minimum, registeredAt: registered,
            recentRuns: [.init(startedAt: now, outcome: .newData), .init(startedAt: minutes(0), outcome: .newData)],
            isRunning: false)
        #expect(policy.dueDecision(for: ranAgain, now: now.addingTimeInterval(120)).dueAt == minutes(-24 * 60 + 15))
        let registeredAhead = FetchCandidate(
            app: app, interval: .minimum, registeredAt: minutes(10), recentRuns: [], isRunning: false)
        #expect(policy.dueDecision(for: registeredAhead, now: minutes(0)).dueAt == minutes(0))
    }

    /// The same for an app woken rarely (never opened): its last run stamped a day ahead makes
    /// it due now, not an unused app's interval from each pass's now.
    @Test func aRarelyWokenAppIsDueOnceAfterTheClockWentBack() {
        let rarely = FetchPolicy(configuration: .init(unusedAppInterval: .seconds(6 * 3600)))
        let outlook = UsageOutlook(learner: UsageLearner(), planner: AdaptiveWakePlanner(), threshold: 0.3)
        let now = minutes(-24 * 60)
        let plan = rarely.plan(
            for: [candidate(.minimum, runs: [(0, .newData)])], runningCount: 0, usage: outlook, now: now)
        #expect(plan.launch == [app], "\(plan.decisions)")
        let usual = rarely.plan(
            for: [candidate(.minimum, runs: [(0, .newData)])], runningCount: 0, usage: outlook, now: minutes(60))
        #expect(usual.decisions.first?.dueAt == minutes(6 * 60), "otherwise as rarely as before")
    }

    @Test func aTimeAFractionOfASecondAheadIsNoClockGoingBack() {
        // A run's end read back from the store, rounded to the millisecond, on a clock that has
        // not moved since (a test's frozen clock; a fast machine).
        let now = minutes(0).addingTimeInterval(-0.0004)
        let decision = policy.dueDecision(for: candidate(.minimum, runs: [(0, .newData)]), now: now)
        #expect(decision.dueAt == now.addingTimeInterval(15 * 60))
        #expect(!decision.reasons.map(\.code).contains(.clockWentBackwards))
    }

    @Test func aClockJumpForwardWakesOnceNotForEveryMissedInterval() {
        // Days pass in one jump: the app is due once, and the plan launches it once.
        let plan = policy.plan(
            for: [candidate(.minimum, runs: [(0, .newData)])], runningCount: 0, now: minutes(3 * 24 * 60))
        #expect(plan.launch == [app])
        let after = policy.plan(
            for: [candidate(.minimum, runs: [(0, .newData), (3 * 24 * 60, .newData)])], runningCount: 0,
            now: minutes(3 * 24 * 60 + 1))
        #expect(after.launch.isEmpty)
        #expect(after.nextEvaluation == minutes(3 * 24 * 60 + 15))
    }

    /// The plan says what each wake carries out: a pending app refresh task whose date has come
    /// takes it; before its date, or with none, it is a fetch.
    @Test(arguments: [(nil as Double?, true), (20, true), (40, false)])
    func aDueWakeCarriesOutThePendingRefreshTask(earliestBegin: Double?, takesTheTask: Bool) {
        var due = candidate(.minimum, runs: [(0, .newData)])
        due.pendingRefreshTask = "com.example.a.refresh"
        due.notBefore = earliestBegin.map(minutes)
        let now = minutes(max(30, (earliestBegin ?? 0) + 1))
        let plan = policy.plan(for: [due], runningCount: 0, now: takesTheTask ? now : minutes(30))
        if takesTheTask {
            #expect(plan.starts.map(\.work) == [.refreshTask(identifier: "com.example.a.refresh")])
        } else {
            #expect(plan.starts.isEmpty, "the wake waits for the task's date")
        }
        var plain = candidate(.minimum, runs: [(0, .newData)])
        plain.notBefore = nil
        #expect(policy.plan(for: [plain], runningCount: 0, now: minutes(30)).starts.map(\.work) == [.fetch])
        // An interval wake is no predicted open: it spends no usage budget.
        #expect(policy.plan(for: [plain], runningCount: 0, now: minutes(30)).starts.first?.servesPredictedOpen == false)
    }

    @Test func planLaunchesTheMostOverdueFirstWithinTheConcurrencyLimit() {
        let candidates = [
            candidate(.minimum, runs: [(10, .newData)], id: "com.example.b"),
            candidate(.minimum, runs: [(0, .newData)], id: "com.example.a"),
            candidate(.minimum, runs: [(5, .newData)], id: "com.example.c"),
            candidate(.every(.seconds(7200)), runs: [(0, .newData)], id: "com.example.d"),
        ]
        let plan = policy.plan(for: candidates, runningCount: 0, now: minutes(30))
        #expect(plan.launch.map(\.rawValue) == ["com.example.a", "com.example.c"])
        #expect(plan.decision(for: AppID(rawValue: "com.example.b")!)?.reasons.last?.code == .concurrencyLimit)
        #expect(plan.nextEvaluation == minutes(120))
        let busy = policy.plan(for: candidates, runningCount: 2, now: minutes(30))
        #expect(busy.launch.isEmpty)
    }
}

struct RunBudgetTests {
    let start = Date(timeIntervalSince1970: 1_767_603_600)
    let budget = RunBudget(budget: .seconds(30), expirationLead: .seconds(5), killGrace: .seconds(5))

    @Test(arguments: [
        (0.0, false, RunBudget.Step.wait(until: Date(timeIntervalSince1970: 1_767_603_625))),
        (25.0, false, .warn(nextAt: Date(timeIntervalSince1970: 1_767_603_630))),
        (26.0, true, .wait(until: Date(timeIntervalSince1970: 1_767_603_630))),
        (30.0, true, .terminate(killAt: Date(timeIntervalSince1970: 1_767_603_635))),
        (35.0, true, .kill),
    ])
    func stepsThroughWarnTerminateKill(seconds: Double, warned: Bool, expected: RunBudget.Step) {
        #expect(budget.step(startedAt: start, warned: warned, now: start.addingTimeInterval(seconds)) == expected)
    }
}
