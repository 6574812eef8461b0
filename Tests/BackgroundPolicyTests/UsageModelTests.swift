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

struct AdaptiveWakePlannerTests {
    let monday = Date(timeIntervalSince1970: 1_767_571_200)
    func at(day: Int, hour: Double) -> Date { monday.addingTimeInterval(Double(day) * 86400 + hour * 3600) }

    /// The seed's promise: "if you use the app every day at 12:00, the system fetches at 11:50".
    @Test func wakesShortlyBeforeTheDailyOpen() throws {
        var model = UsageModel()
        for day in 0..<7 { model.recordOpen(at: at(day: day, hour: 12)) }
        let plan = AdaptiveWakePlanner().plan(for: model, lastRefresh: at(day: 6, hour: 12), wakesInLastDay: 0, now: at(day: 7, hour: 6))
        let wake = try #require(plan.first)
        #expect(wake.at >= at(day: 7, hour: 11) && wake.at < at(day: 7, hour: 12), "\(wake.at)")
        #expect(plan.count == 1, "one open a day, one wake a day")
    }

    @Test func anAppNeverOpenedIsNeverWoken() {
        let plan = AdaptiveWakePlanner().plan(for: UsageModel(), lastRefresh: nil, wakesInLastDay: 0, now: monday)
        #expect(plan.isEmpty)
    }

    @Test func theDailyBudgetIsRespected() {
        var model = UsageModel()
        for day in 0..<7 { for hour in [8.0, 12, 18] { model.recordOpen(at: at(day: day, hour: hour)) } }
        let planner = AdaptiveWakePlanner(configuration: .init(wakesPerOpen: 1))
        let now = at(day: 7, hour: 0)
        #expect(planner.plan(for: model, lastRefresh: nil, wakesInLastDay: 0, now: now).count == 3)
        #expect(planner.plan(for: model, lastRefresh: nil, wakesInLastDay: 2, now: now).count == 1)
        #expect(planner.plan(for: model, lastRefresh: nil, wakesInLastDay: 3, now: now).isEmpty)
    }
}

struct CoUsageModelTests {
    let start = Date(timeIntervalSince1970: 1_767_603_600)

    @Test func learnsWhichAppsFollowActivity() {
        var model = CoUsageModel()
        // Thirty days: each morning mail is opened, and chat starts a session 20 minutes later.
        for day in 0..<30 {
            let morning = start.addingTimeInterval(Double(day) * 86400)
            model.recordOpen(of: "mail", at: morning, isSessionStart: true)
            model.recordOpen(of: "chat", at: morning.addingTimeInterval(1200), isSessionStart: true)
        }
        // Mail opens are followed by chat; chat opens by nothing.
        let chat = model.chanceOfSession(of: "chat")
        let mail = model.chanceOfSession(of: "mail")
        #expect(chat != nil && chat! > 0.4)
        #expect(mail != nil && mail! < 0.1)
        #expect(model.chanceOfSession(of: "never-seen") == 0)
    }

    @Test func saysNothingBeforeEnoughActivity() {
        var model = CoUsageModel()
        model.recordOpen(of: "mail", at: start, isSessionStart: true)
        model.recordOpen(of: "chat", at: start.addingTimeInterval(7200), isSessionStart: true)
        #expect(model.chanceOfSession(of: "chat") == nil)
    }
}
