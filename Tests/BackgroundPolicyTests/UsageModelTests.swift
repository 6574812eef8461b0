import BackgroundModel
import BackgroundPolicy
import Foundation
import Testing

struct UsageModelTests {
    /// Monday 2026-01-05 00:00 UTC.
    let monday = Date(timeIntervalSince1970: 1_767_571_200)
    func at(day: Int, hour: Double) -> Date { monday.addingTimeInterval(Double(day) * 86400 + hour * 3600) }

    @Test func learnsADailyHabit() {
        var model = UsageModel()
        for day in 0..<7 { model.recordOpen(at: at(day: day, hour: 12)) }
        let now = at(day: 7, hour: 8)
        let noon = model.sessionStartRate(inSlotContaining: at(day: 7, hour: 12.1), now: now)
        let night = model.sessionStartRate(inSlotContaining: at(day: 7, hour: 3), now: now)
        #expect(noon > 0.2)
        #expect(night == 0)
        #expect((0.8...1.2).contains(model.sessionsPerDay(now: now)))
    }

    @Test func opensCloseTogetherAreOneSession() {
        var model = UsageModel()
        for minutes in [0.0, 20, 40, 110] { model.recordOpen(at: at(day: 0, hour: 9 + minutes / 60)) }
        // 9:00, 9:20, 9:40 are one session; 10:50 (70 minutes after 9:40) starts another.
        #expect((1.99...2.0).contains(model.daySlots.reduce(0, +)))
        #expect(model.opensPerDay(now: at(day: 0, hour: 11)) > model.sessionsPerDay(now: at(day: 0, hour: 11)))
    }

    @Test func oldHabitsFade() {
        var model = UsageModel(configuration: .init(halfLife: .seconds(7 * 86400)))
        for day in 0..<14 { model.recordOpen(at: at(day: day, hour: 8)) }
        for day in 14..<42 { model.recordOpen(at: at(day: day, hour: 20)) }
        let now = at(day: 42, hour: 0)
        let old = model.sessionStartRate(inSlotContaining: at(day: 42, hour: 8.1), now: now)
        let new = model.sessionStartRate(inSlotContaining: at(day: 42, hour: 20.1), now: now)
        #expect(new > 10 * old)
    }

    @Test func aClockThatGoesBackDoesNotCorruptTheModel() {
        var model = UsageModel()
        model.recordOpen(at: at(day: 3, hour: 12))
        model.recordOpen(at: at(day: 1, hour: 12))  // the wall clock jumped back two days
        #expect(model.lastOpen == at(day: 3, hour: 12))
        #expect(model.sessionsPerDay(now: at(day: 3, hour: 13)).isFinite)
        #expect(model.sessionStartRate(inSlotContaining: at(day: 2, hour: 0), now: at(day: 1, hour: 0)).isFinite)
    }

    @Test func anAppWithNoHistoryHasNoRates() {
        let model = UsageModel()
        #expect(model.sessionsPerDay(now: monday) == 0)
        #expect(model.sessionStartRate(inSlotContaining: monday, now: monday) == 0)
    }
}

struct UsageLearnerTests {
    let monday = Date(timeIntervalSince1970: 1_767_571_200)
    func at(day: Int, hour: Double) -> Date { monday.addingTimeInterval(Double(day) * 86400 + hour * 3600) }

    /// Mail is always read 20 minutes after chat; on its own, at no particular time.
    @Test func learnsThatTheUserBeingActiveRaisesTheChance() {
        var learner = UsageLearner()
        for day in 0..<21 {
            for hour in [9.0, 13, 17, 21] {
                let jitter = Double((day * 7 + Int(hour)) % 5) * 0.4
                learner.recordOpen(of: "chat", at: at(day: day, hour: hour + jitter))
                learner.recordOpen(of: "mail", at: at(day: day, hour: hour + jitter + 1.0 / 3))
            }
        }
        learner.advance(to: at(day: 21, hour: 0))
        let active = learner.lift.lifts(
            app: "mail", context: UsageContext(activity: .justNow, sinceOpen: .within6Hours))
        let idle = learner.lift.lifts(app: "mail", context: UsageContext(activity: .idle, sinceOpen: .within6Hours))
        #expect(active.activity > 1.5 * idle.activity, "\(active) vs \(idle)")
    }

    @Test func forgetsAnApp() {
        var learner = UsageLearner()
        for day in 0..<7 { learner.recordOpen(of: "news", at: at(day: day, hour: 12)) }
        learner.forget(app: "news")
        #expect(learner.prediction(for: "news", after: at(day: 7, hour: 11), now: at(day: 7, hour: 11)) == nil)
    }

    @Test func aClockJumpForwardByDaysIsBounded() {
        var learner = UsageLearner()
        for day in 0..<7 { learner.recordOpen(of: "news", at: at(day: day, hour: 12)) }
        // A year later: only the last two days are sampled, and the model still answers.
        learner.advance(to: at(day: 372, hour: 0))
        learner.recordOpen(of: "news", at: at(day: 372, hour: 12))
        let prediction = learner.prediction(for: "news", after: at(day: 373, hour: 11), now: at(day: 373, hour: 11))
        #expect(prediction?.expectedStarts.isFinite == true)
    }

    @Test func aClockJumpBackCountsTheOpenAtTheLatestTime() {
        var learner = UsageLearner()
        learner.recordOpen(of: "news", at: at(day: 3, hour: 12))
        learner.recordOpen(of: "news", at: at(day: 1, hour: 12))
        #expect(learner.lastActivity == at(day: 3, hour: 12))
        #expect(learner.models["news"]?.lastOpen == at(day: 3, hour: 12))
    }

    /// A flood of reports (a buggy app reporting opens in a loop) is one long session: it adds
    /// no session starts after the first and leaves the habits the model had.
    @Test func aFloodOfOpensIsOneSession() {
        var learner = UsageLearner()
        for day in 0..<7 { learner.recordOpen(of: "news", at: at(day: day, hour: 12)) }
        for second in 0..<10_000 {
            learner.recordOpen(of: "news", at: at(day: 7, hour: 3).addingTimeInterval(Double(second) * 0.1))
        }
        let sessions = learner.models["news"]!.daySlots.reduce(0, +)
        #expect(sessions < 8.5)
    }
}

struct AdaptiveWakePlannerTests {
    let monday = Date(timeIntervalSince1970: 1_767_571_200)
    func at(day: Int, hour: Double) -> Date { monday.addingTimeInterval(Double(day) * 86400 + hour * 3600) }

    func dailyNoon(days: Int) -> UsageLearner {
        var learner = UsageLearner()
        for day in 0..<days { learner.recordOpen(of: "news", at: at(day: day, hour: 12)) }
        learner.advance(to: at(day: days - 1, hour: 18))
        return learner
    }

    /// The seed's promise: "if you use the app every day at 12:00, the system fetches at 11:50".
    @Test func wakesShortlyBeforeTheDailyOpen() throws {
        let learner = dailyNoon(days: 7)
        let now = at(day: 7, hour: 6)
        let wake = try AdaptiveWakePlanner().nextWake(
            "news", learner: learner, threshold: 0.3, lastRefresh: at(day: 6, hour: 12), recentWakes: [],
            notBefore: now, now: now
        ).get()
        #expect(wake.at >= at(day: 7, hour: 11) && wake.at < at(day: 7, hour: 12), "\(wake.at)")
        #expect(wake.prediction.expectedStarts >= 0.3)
    }

    @Test func forecastsOneWakeADayForOneOpenADay() {
        let learner = dailyNoon(days: 7)
        let now = at(day: 7, hour: 0)
        let forecast = AdaptiveWakePlanner().forecast(
            "news", learner: learner, threshold: 0.3, lastRefresh: at(day: 6, hour: 12), recentWakes: [],
            notBefore: now,
            until: at(day: 9, hour: 0), now: now)
        #expect(forecast.wakes.count == 2, "\(forecast.wakes.map { ($0.at, $0.prediction.expectedStarts) })")
        #expect(
            forecast.wakes.allSatisfy { wake in
                (11.0..<12.0).contains(wake.at.timeIntervalSince(monday).truncatingRemainder(dividingBy: 86400) / 3600)
            })
    }

    @Test func anAppNeverOpenedIsNeverWoken() {
        let result = AdaptiveWakePlanner().nextWake(
            "unknown", learner: UsageLearner(), threshold: 0.3, lastRefresh: nil, recentWakes: [], notBefore: monday,
            now: monday)
        #expect(result == .failure(.neverOpened))
    }

    @Test func theDailyCapIsRespected() {
        let learner = dailyNoon(days: 7)
        let planner = AdaptiveWakePlanner(configuration: .init(wakesPerOpen: 1, appShareCap: 1))
        let now = at(day: 7, hour: 11.5)
        #expect(planner.dailyCap(for: "news", learner: learner, now: now) == 1)
        let result = planner.evaluate(
            "news", at: now, learner: learner, threshold: 0.01, lastRefresh: nil, wakesInLastDay: 1, now: now)
        #expect(result == .failure(.budgetSpent(spent: 1, cap: 1)))
    }

    @Test func aFreshRefreshHoldsTheNextWake() {
        let learner = dailyNoon(days: 7)
        let now = at(day: 7, hour: 11.5)
        let result = AdaptiveWakePlanner().evaluate(
            "news", at: now, learner: learner, threshold: 0.01, lastRefresh: at(day: 7, hour: 11), wakesInLastDay: 0,
            now: now)
        #expect(result == .failure(.stillFresh(until: at(day: 7, hour: 12))))
    }
}

struct WakeThresholdTests {
    let start = Date(timeIntervalSince1970: 1_767_571_200)

    @Test func movesTowardTheBudget() {
        var threshold = WakeThreshold(initial: 0.3)
        threshold.update(now: start, budgetPerDay: 10)
        for _ in 0..<20 { threshold.recordWake() }
        threshold.update(now: start.addingTimeInterval(86400), budgetPerDay: 10)
        #expect(abs(threshold.value - 0.6) < 1e-9, "twice the budget spent: the bar doubles")
        for _ in 0..<5 { threshold.recordWake() }
        threshold.update(now: start.addingTimeInterval(2 * 86400), budgetPerDay: 10)
        #expect(abs(threshold.value - 0.3) < 1e-9, "half spent: the bar halves")
    }

    @Test func staysWithinBoundsAndSurvivesAClockGoingBack() {
        var threshold = WakeThreshold(initial: 0.3)
        threshold.update(now: start, budgetPerDay: 1)
        for day in 1...40 {
            for _ in 0..<100 { threshold.recordWake() }
            threshold.update(now: start.addingTimeInterval(Double(day) * 86400), budgetPerDay: 1)
        }
        #expect(threshold.value == WakeThreshold.range.upperBound)
        threshold.update(now: start, budgetPerDay: 1)  // 40 days back
        #expect(threshold.periodStart == start && threshold.spentInPeriod == 0)
    }
}
