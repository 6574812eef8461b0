import BackgroundModel
import Foundation
import Testing

@testable import BackgroundPolicy

/// The online wake budget: a balance that never goes below its credit, and a threshold that
/// moves toward the budget.
struct WakeBudgetTests {
    let day = 86400.0

    @Test func opensEarnWakesAndNoWakeGoesBeyondTheCredit() {
        var budget = WakeBudget(wakesPerOpen: 1, initialThreshold: 0.1)
        #expect(!budget.allows(1, at: 0), "nothing earned, nothing known of the user's pace")
        for hour in 0..<10 { budget.recordOpen(at: Double(hour) * 3600) }
        // Ten opens on the first day: a day's allowance is 10, the credit half of it.
        #expect(budget.dailyAllowance(at: 36000) == 10)
        var spent = 0
        while budget.allows(1, at: 36000) {
            budget.spend(at: 36000)
            spent += 1
        }
        #expect(spent == 15, "10 earned + 5 borrowed")
        #expect(!budget.allows(1000, at: 36000), "however good the chance")
    }

    @Test func savingsStopAtTwoDaysOfBudget() {
        var budget = WakeBudget(wakesPerOpen: 2, initialThreshold: 0.1)
        // Ten opens a day for ten days, no wake: 200 earned, 2 days × 20 kept.
        for i in 0..<100 { budget.recordOpen(at: Double(i) * 8640) }
        let allowance = budget.dailyAllowance(at: 99 * 8640)
        #expect(abs(allowance - 20) < 0.5)
        #expect(budget.balance == WakeBudget.savingDays * allowance)
    }

    /// The threshold is fitted to the last week's candidates: about the budget's worth of them
    /// clear it, the best first.
    /// Two users alike but for what they spent last week: the one who left budget unspent gets
    /// a lower threshold, so this week spends it.
    @Test func aWeekLeftUnspentLowersTheThreshold() {
        func live(spendingEvery spendStride: Int) -> WakeBudget {
            var budget = WakeBudget(wakesPerOpen: 1, initialThreshold: 0.5)
            for hour in 0..<(9 * 24) {
                let t = Double(hour) * 3600
                if hour % 2 == 0 { budget.recordOpen(at: t) }  // 12 opens a day
                for app in 0..<4 {
                    let score = Double((hour * 7 + app * 13) % 97 + 1) / 100
                    budget.consider("app\(app)", score: score, at: t + 1, lastOpen: t - 7200)
                }
                if hour % spendStride == 0 { budget.spend(at: t + 1) }
            }
            budget.adjust(at: 9 * day)
            return budget
        }
        let spentAll = live(spendingEvery: 2)
        let spentHalf = live(spendingEvery: 4)
        #expect(spentHalf.threshold < spentAll.threshold, "\(spentHalf.threshold) vs \(spentAll.threshold)")
    }

    @Test func theThresholdIsFittedToTheBudget() {
        var budget = WakeBudget(wakesPerOpen: 1.1, initialThreshold: 0.5)
        // Every ten minutes ten apps are candidates, app k scoring k / 10; each may be woken once
        // an hour. An open an hour earns 26.4 wakes a day: the best app's 24 hourly wakes.
        var lastWake: [Int: Double] = [:]
        var spent = 0
        func live(days: ClosedRange<Int>, opensEvery: Int) {
            for step in (days.lowerBound * 144)..<(days.upperBound * 144) {
                let t = Double(step) * 600
                if step % opensEvery == 0 { budget.recordOpen(at: t) }
                for k in 1...10 { budget.consider("app\(k)", score: Double(k) / 10, at: t, lastOpen: -1e9) }
                budget.adjust(at: t)
                // The planner wakes what the threshold lets through (what was spent is read back).
                for k in 1...10 where budget.allows(Double(k) / 10, at: t) && t - (lastWake[k] ?? -1e9) >= 3600 {
                    budget.spend(at: t)
                    lastWake[k] = t
                    spent += 1
                }
            }
        }
        live(days: 0...3, opensEvery: 6)
        #expect(budget.threshold == 1, "threshold \(budget.threshold)")
        // An open every 20 minutes from now on: 79.2 wakes a day, between the best three apps'
        // hourly wakes (72) and the best four's (96). The fit alone would settle at 0.8 and
        // leave 7 a day unspent; making up the shortfall moves it between 0.8 and 0.7, and the
        // balance holds the spending to the budget.
        live(days: 3...9, opensEvery: 2)
        spent = 0
        live(days: 9...11, opensEvery: 2)
        #expect([0.7, 0.8].contains(budget.threshold), "threshold \(budget.threshold)")
        // The last two days: more than the best three apps' wakes, within what they earned
        // (and the half day a morning may borrow).
        #expect(Double(spent) > 2 * 72, "\(spent)")
        #expect(Double(spent) <= 2 * 79.2 + 0.5 * 79.2 + 1, "\(spent)")
    }
}

/// The online fit of one threshold to a budget, by replaying the candidates it kept.
struct ThresholdFitTests {
    @Test func theLowestThresholdWithinTheBudget() {
        var fit = ThresholdFit(window: .seconds(86400), rewake: .seconds(3600))
        // One candidate an hour for each of three apps, for a day: scores 0.2, 0.5, 0.8.
        for hour in 0..<24 {
            for (app, score) in [("a", 0.2), ("b", 0.5), ("c", 0.8)] {
                fit.record(app, score: score, at: Double(hour) * 3600, lastOpen: -1e9)
            }
        }
        for (budget, expected) in [(24.0, 0.8), (47.0, 0.8), (48.0, 0.5), (72.0, 0.2), (1000, 0.2)] {
            let threshold = fit.threshold(spending: budget, at: 86400, from: 0.3)!
            #expect(fit.wakes(at: threshold) <= Int(budget), "budget \(budget)")
            #expect(abs(threshold - expected) < 0.02 * expected, "budget \(budget): \(threshold)")
        }
        // Not even the best fits: its score, and the budget's balance limits what goes.
        #expect(fit.threshold(spending: 3, at: 86400, from: 0.3) == 0.8)
    }

    @Test func anAppIsNotCountedTwiceWithinTheRewakeUnlessOpened() {
        var fit = ThresholdFit(window: .seconds(86400), rewake: .seconds(3600))
        for minute in stride(from: 0.0, to: 60, by: 10) { fit.record("a", score: 1, at: minute * 60, lastOpen: -1e9) }
        #expect(fit.wakes(at: 0.5) == 1, "six candidates within the hour: one wake")
        fit.record("a", score: 1, at: 3000, lastOpen: 2900)  // opened meanwhile: a new wake
        #expect(fit.wakes(at: 0.5) == 2)
    }

    @Test func candidatesOlderThanTheWindowAreForgotten() {
        var fit = ThresholdFit(window: .seconds(3600), rewake: .seconds(600))
        fit.record("a", score: 0.9, at: 0, lastOpen: -1e9)
        fit.record("b", score: 0.1, at: 7200, lastOpen: -1e9)
        #expect(fit.threshold(spending: 5, at: 7300, from: 0.5) == 0.1)
        #expect(fit.count == 1)
        var empty = ThresholdFit()
        #expect(empty.threshold(spending: 5, at: 0, from: 0.5) == nil)
    }
}

/// The learned usage learns from the moments between opens when the next open arrives, and
/// plans the next wake from them.
struct LearnedUsageTests {
    let day = 86400.0

    @Test func learnsFromOpensAloneAndPlansBeforeTheHabit() throws {
        // One wake per open: the budget has none to spare for a wake two hours early.
        var usage = LearnedUsage(configuration: .init(wakesPerOpen: 1))
        for d in 0..<21 {
            usage.recordOpen(of: "news", at: Double(d) * day + 9 * 3600)  // every day at 09:00
            usage.recordOpen(of: "chat", at: Double(d) * day + 20 * 3600 + Double(d * 677 % 7200))
        }
        #expect(usage.predictor.examplesLearned > 1000, "learned \(usage.predictor.examplesLearned)")
        let t = 21 * day + 6 * 3600
        usage.adjust(at: t)
        let wake = try usage.nextWake("news", lastWake: nil, notBefore: t, until: t + day).get()
        #expect(wake.at >= 21 * day + 8 * 3600 && wake.at < 21 * day + 9 * 3600, "\(wake.at / 3600 - 21 * 24) h")
        #expect(wake.estimate.probability >= wake.threshold)
        let early = try #require(usage.estimate(of: "news", at: 21 * day + 3 * 3600))
        #expect(early.probability < wake.estimate.probability)
        // Why: the features that moved it, strongest first.
        let strongest = wake.estimate.strongest(3)
        #expect(abs(strongest[0].1) >= abs(strongest[2].1))
    }

    @Test func holdsBackWithAReason() {
        var usage = LearnedUsage()
        #expect(usage.estimate(of: "never", at: 0) == nil)
        if case .failure(.neverOpened) = usage.nextWake("never", lastWake: nil, notBefore: 0, until: day) {
        } else {
            Issue.record("an app never opened has nothing to predict from")
        }
        usage.recordOpen(of: "a", at: 1000)
        if case .failure(.stillFresh(let until)) = usage.wake("a", at: 1600, lastWake: nil) {
            #expect(until == 1000 + 3600)
        } else {
            Issue.record("just opened: fresh")
        }
        // Woken at 5000 with no open since: not again within the hour.
        if case .failure(.stillFresh) = usage.wake("a", at: 6000, lastWake: 5000) {
        } else {
            Issue.record("woken ten minutes ago: fresh")
        }
        // An earlier open than the last is ignored, not learned out of order.
        usage.recordOpen(of: "a", at: 500)
        #expect(usage.history.opens["a"] == [1000])
    }

    /// Learning when the next open arrives gives the same model whether or not anybody looked
    /// in between: the daemon, asleep for hours, and the replay agree.
    @Test func lookingInBetweenChangesNothing() {
        var asleep = LearnedUsage()
        var looking = LearnedUsage()
        for d in 0..<10 {
            for (app, hour) in [("a", 8.0), ("b", 13.5), ("a", 19.0)] {
                let t = Double(d) * day + hour * 3600
                asleep.recordOpen(of: app, at: t)
                looking.recordOpen(of: app, at: t)
                for k in 1...5 {
                    _ = looking.wake("b", at: t + Double(k) * 1234, lastWake: nil)
                    looking.adjust(at: t + Double(k) * 1234)
                }
            }
        }
        asleep.adjust(at: 10 * day)
        looking.adjust(at: 10 * day)
        let at = 10 * day + 7.5 * 3600
        #expect(asleep.estimate(of: "a", at: at)?.probability == looking.estimate(of: "a", at: at)?.probability)
        #expect(asleep.predictor.examplesLearned == looking.predictor.examplesLearned)
    }
}

/// What the open predictor reads: session starts only, from the past only.
struct OpenHistoryTests {
    let day = 86400.0

    @Test func onlySessionStartsCountInTheRates() {
        var repeated = OpenHistory()
        var once = OpenHistory()
        for d in 0..<20 {
            let nine = Double(d) * day + 9 * 3600
            once.recordOpen(of: "a", at: nine)
            // The same use logged every 20 minutes for an hour: one session.
            for k in 0..<3 { repeated.recordOpen(of: "a", at: nine + Double(k) * 1200) }
        }
        let at = 20 * day + 9 * 3600 - 600
        #expect(repeated.starts["a"]?.count == 20)
        #expect(
            abs(repeated.dayRate(of: "a", at: at, length: 3600) - once.dayRate(of: "a", at: at, length: 3600)) < 1e-9)
        // About one session a day in that hour (decayed counts approach the rate).
        #expect((0.3...1.1).contains(once.dayRate(of: "a", at: at, length: 3600)))
        #expect(once.dayRate(of: "a", at: at - 6 * 3600, length: 3600) == 0)
        #expect(once.shareOfDays(with: "a", at: at, length: 3600, days: 7) == 1)
        #expect(once.shareOfDays(with: "a", at: at - 6 * 3600, length: 3600, days: 7) == 0)
    }

    @Test func coUsageAndTheFirstThingAfterALongIdle() {
        var history = OpenHistory()
        for d in 0..<10 {
            let morning = Double(d) * day + 7 * 3600
            history.recordOpen(of: "alarm", at: morning)  // first after the night
            history.recordOpen(of: "mail", at: morning + 300)  // follows the alarm
        }
        #expect(history.afterIdleShare(of: "alarm") > 0.8)
        #expect(history.afterIdleShare(of: "mail") == 0)
        #expect(history.coUsage(of: "mail", at: 10 * day + 15 * 3600) == 0, "nothing opened in the last hour")
        var now = history
        now.recordOpen(of: "alarm", at: 10 * day + 7 * 3600)
        #expect(now.coUsage(of: "mail", at: 10 * day + 7 * 3600 + 60) > 0.8)
        // The user is up: mail, opened every past morning, is likely now — and not once it was.
        #expect(now.morningHabit(of: "mail", at: 10 * day + 7 * 3600 + 60) > 0.9)
        #expect(now.morningHabit(of: "mail", at: 10 * day + 15 * 3600) == 0, "the morning is over")
        now.recordOpen(of: "mail", at: 10 * day + 7 * 3600 + 120)
        #expect(now.morningHabit(of: "mail", at: 10 * day + 7 * 3600 + 180) == 0)
    }
}

extension OpenHistoryTests {
    /// A session that began before the cutoff and goes on after it keeps its later opens but not
    /// its start: an app that follows it then has a finite co-usage share (it was 1/0).
    @Test func coUsageIsFiniteAfterASessionsStartWasForgotten() {
        var history = OpenHistory()
        let t0 = 1_767_571_200.0
        history.recordOpen(of: "mail", at: t0)
        history.recordOpen(of: "mail", at: t0 + 50 * 60)  // the same session
        history.forget(before: t0 + 10 * 60)
        history.recordOpen(of: "news", at: t0 + 55 * 60)  // follows mail
        let share = history.coUsage(of: "news", at: t0 + 56 * 60)
        #expect(share.isFinite, "\(share)")
    }

    /// With a time zone, each open is read in the offset of its own moment: noon in New York is
    /// the same slot of the day in January (UTC−5) and in July (UTC−4), and the week's slot too.
    /// A fixed offset (the one bgd started with) put one of them an hour off.
    @Test func aTimeZoneReadsEachOpenInItsOwnOffset() throws {
        let zone = try #require(TimeZone(identifier: "America/New_York"))
        let zoned = OpenHistory(configuration: .init(timeZone: zone))
        let january = 1_767_978_000.0  // Friday 2026-01-09 12:00 EST (17:00 UTC)
        let july = 1_783_699_200.0  // Friday 2026-07-10 12:00 EDT (16:00 UTC)
        #expect(zoned.daySlot(january) == 72 && zoned.daySlot(july) == 72)
        #expect(zoned.weekSlot(january) == zoned.weekSlot(july))
        let fixed = OpenHistory(configuration: .init(utcOffset: .seconds(-5 * 3600)))
        #expect(fixed.daySlot(january) == 72 && fixed.daySlot(july) == 66)
        // The table says what the zone says, on both sides of each change (2026: March 8 and
        // November 1, at 07:00 and 06:00 UTC).
        let offsets = ZoneOffsets(zone)
        let wrong = stride(from: 1_767_225_600.0, to: 1_798_761_600, by: 1800).filter {
            offsets.offset(at: $0) != Double(zone.secondsFromGMT(for: Date(timeIntervalSince1970: $0)))
        }
        #expect(wrong.isEmpty, "\(wrong.count) moments of 2026 read in the wrong offset: \(wrong.prefix(3))")
    }

    /// A week of a user's opens, day `d`: the alarm first after the night, mail after it, chat
    /// in the evening, and `extra` at noon if given.
    static func week(from first: Int, _ history: inout OpenHistory, extra: String? = nil) {
        let day = 86400.0
        for d in first..<(first + 7) {
            let morning = Double(d) * day + 7 * 3600 + Double(d * 431 % 1800)
            history.recordOpen(of: "alarm", at: morning)
            history.recordOpen(of: "mail", at: morning + 300 + Double(d * 97 % 600))
            if let extra { history.recordOpen(of: extra, at: Double(d) * day + 12 * 3600) }
            history.recordOpen(of: "chat", at: Double(d) * day + 20 * 3600 + Double(d * 677 % 3600))
            history.recordOpen(of: "mail", at: Double(d) * day + 20 * 3600 + 1800 + Double(d * 677 % 3600))
        }
    }

    /// Forgetting the opens before a cutoff leaves the history that holds only the opens since:
    /// every feature the model reads agrees, and an app with no open left is gone.
    @Test func forgettingTheOldOpensLeavesTheHistoryOfTheRecentOnes() {
        var longRunning = OpenHistory()
        var recentOnly = OpenHistory()
        for w in 0..<12 {
            // "game" was used for the first four weeks only.
            Self.week(from: w * 7, &longRunning, extra: w < 4 ? "game" : nil)
            if w >= 4 { Self.week(from: w * 7, &recentOnly) }
        }
        longRunning.forget(before: 28 * day)  // midnight, in the night's idle
        #expect(longRunning.allOpens == recentOnly.allOpens)
        #expect(longRunning.appsByName == ["alarm", "chat", "mail"], "game, unopened since, is gone")
        #expect(longRunning.opens["game"] == nil)
        for app in recentOnly.appsByName {
            #expect(longRunning.opens[app] == recentOnly.opens[app])
            for t in stride(from: 84 * day, to: 85 * day, by: 3600) {
                let a = OpenPredictor.features(of: app, at: t, in: longRunning, horizon: 3600)
                let b = OpenPredictor.features(of: app, at: t, in: recentOnly, horizon: 3600)
                for (x, y) in zip(a, b) { #expect(abs(x - y) < 1e-6, "\(app) at \(t / 3600) h: \(a) against \(b)") }
            }
        }
        // Nothing older to drop: no change.
        let before = longRunning.allOpens
        longRunning.forget(before: 28 * day)
        #expect(longRunning.allOpens == before)
    }

    /// The learned usage keeps `memory` of opens (bgd: the 8 weeks a restart reads), so months of
    /// use hold what 8 weeks do, and an app abandoned months ago is neither kept nor woken.
    @Test func monthsOfUseHoldOnlyTheMemoryOfOpens() {
        var usage = LearnedUsage()
        var history = OpenHistory()
        for w in 0..<20 {
            Self.week(from: w * 7, &history, extra: w < 4 ? "game" : nil)
        }
        var all: [(String, Double)] = []
        for (app, times) in history.opens { for t in times { all.append((app, t)) } }
        for (app, t) in all.sorted(by: { $0.1 < $1.1 }) { usage.recordOpen(of: app, at: t) }
        let last = history.allOpens.last!
        let kept = usage.history.allOpens
        #expect(kept.first! >= last - 8 * 7 * day - day, "kept from \((last - kept.first!) / day) days back")
        #expect(kept.count <= history.allOpens.count * 9 / 20, "\(kept.count) of \(history.allOpens.count) opens kept")
        #expect(usage.history.opens["game"] == nil)
        #expect(usage.estimate(of: "game", at: last + 3600) == nil, "an app unopened for 16 weeks is not planned")
    }
}

/// The per-user logistic model learns a habit and says why.
struct OpenPredictorTests {
    /// Walks `days` from 0 in steps of 30 minutes: at each, every predictor learns what is due
    /// and observes "news" where `observes(index, t)` says; then "news" is opened 10 minutes on
    /// where `opened(t, timeOfDay)` says. `endOfDay(d)` runs after each day.
    static func walkHalfHours(
        _ predictors: inout [OpenPredictor], history: inout OpenHistory, days: Int,
        observes: (Int, Double) -> Bool = { _, _ in true }, opened: (Double, Double) -> Bool,
        endOfDay: (Int, inout [OpenPredictor]) -> Void = { _, _ in }
    ) {
        let day = 86400.0
        for d in 0..<days {
            for timeOfDay in stride(from: 0.0, to: day, by: 1800) {
                let t = Double(d) * day + timeOfDay
                let x = OpenPredictor.features(of: "news", at: t, in: history, horizon: 3600)
                for index in predictors.indices {
                    predictors[index].learn(upTo: t, history: history)
                    if observes(index, t) { predictors[index].observe("news", at: t, features: x) }
                }
                if opened(t, timeOfDay) { history.recordOpen(of: "news", at: t + 600) }
            }
            endOfDay(d, &predictors)
        }
    }

    /// A model that learned for 20 weeks and forgot all but the last 8 (as `LearnedUsage` does
    /// daily) standardises its inputs as one that learned those 8 weeks alone, the model bgd
    /// rebuilds at a restart — so `bgctl why` names the same pulls. Before, every example since
    /// it started stayed in the mean and spread each input is standardised by. (The estimate
    /// itself hardly moves either way: a fit absorbs the scaling, but for its small ridge.)
    @Test func forgottenDaysLeaveTheStandardisationOfTheKeptOnes() {
        let day = 86400.0
        let configuration = OpenPredictor.Configuration(negativeSampling: 1)
        var predictors = [OpenPredictor(configuration: configuration), OpenPredictor(configuration: configuration)]
        var history = OpenHistory()
        let (weeks, kept) = (20, 8)
        let from = Double((weeks - kept) * 7) * day
        // The first learns every moment and forgets all but the last 8 weeks; the second learns
        // only those. Twice a day for 12 weeks, then only in the morning.
        Self.walkHalfHours(
            &predictors, history: &history, days: weeks * 7, observes: { index, t in index == 0 || t >= from },
            opened: { t, timeOfDay in timeOfDay == 9 * 3600 || (timeOfDay == 21 * 3600 && t < from) },
            endOfDay: { d, predictors in predictors[0].forgetMoments(before: Double(d + 1 - kept * 7) * day) })
        let (everything, lastWeeks) = (predictors[0], predictors[1])
        let end = Double(weeks * 7) * day
        for hour in [8.5, 15.0, 20.5] {
            let x = OpenPredictor.features(of: "news", at: end + hour * 3600, in: history, horizon: 3600)
            let (a, b) = (everything.estimate(x), lastWeeks.estimate(x))
            let apart = zip(a.contributions, b.contributions).map { abs($0 - $1) }.max() ?? 0
            // The two exact fits, from different starting weights, agree on the estimate to 1e-4
            // and on each feature's pull (which the centring moves) to a few hundredths — a
            // feature and its square share it — against 0.3 to 0.7 without the forgetting.
            #expect(
                apart < 0.1,
                "at \(hour) h: pulls \(a.contributions) after forgetting, \(b.contributions) from the last 8 weeks alone"
            )
            #expect(abs(a.probability - b.probability) < 1e-4)
        }
    }

    @Test func learnsADailyHabitAndNamesWhatMovedIt() {
        let day = 86400.0
        var history = OpenHistory()
        var predictors = [OpenPredictor()]
        Self.walkHalfHours(&predictors, history: &history, days: 28, opened: { _, timeOfDay in timeOfDay == 9 * 3600 })  // every day at 9:10
        let predictor = predictors[0]
        #expect(predictor.examplesLearned > 1000)
        let t = 28 * day
        let before = predictor.estimate(
            OpenPredictor.features(of: "news", at: t + 8.5 * 3600, in: history, horizon: 3600))
        let afternoon = predictor.estimate(
            OpenPredictor.features(of: "news", at: t + 15 * 3600, in: history, horizon: 3600))
        #expect(before.probability > 0.5)
        #expect(afternoon.probability < 0.1)
        #expect(before.probability > 5 * afternoon.probability)
        // The explanation names time-of-day evidence among what moved it most.
        let strongest = before.strongest(4).map(\.0)
        #expect(
            strongest.contains { [.hourOfDayRate, .hourOfWeekRate, .days7, .days28, .sameWeekday].contains($0) },
            "\(strongest)")
    }
}

/// The daily exact refit: once a day of examples exists the weights are fitted to the kept
/// month, and the kept examples stay within it.
struct OpenPredictorRefitTests {
    let day = 86400.0

    /// A habit at 9:10 every day, looked at every 30 minutes: the model the refits make must say
    /// the same as the online one does (before 9:10 likely, the afternoon not), and sharper.
    @Test func refitsDailyAndKeepsOnlyItsMemory() {
        var history = OpenHistory()
        var predictors = [
            OpenPredictor(configuration: .init(refitEvery: .seconds(1000 * 86400))),
            OpenPredictor(configuration: .init(memory: .seconds(14 * 86400))),
        ]
        OpenPredictorTests.walkHalfHours(
            &predictors, history: &history, days: 42, opened: { _, timeOfDay in timeOfDay == 9 * 3600 })
        let (online, refitted) = (predictors[0], predictors[1])
        #expect(online.refits == 0)
        #expect((40...42).contains(refitted.refits), "one a day after the first: \(refitted.refits)")
        // 14 days of 48 moments, the negatives one in ten: about 14 × (1 + 47 / 10).
        #expect((60...100).contains(refitted.examplesKept), "\(refitted.examplesKept)")
        let t = 42 * day
        func chance(_ model: OpenPredictor, at hour: Double) -> Double {
            model.estimate(OpenPredictor.features(of: "news", at: t + hour * 3600, in: history, horizon: 3600))
                .probability
        }
        #expect(chance(refitted, at: 8.5) > 0.5)
        #expect(chance(refitted, at: 15) < 0.05)
        #expect(chance(refitted, at: 8.5) >= chance(online, at: 8.5))
        #expect(chance(refitted, at: 15) <= chance(online, at: 15))

        // The explanation accounts for every input (squares and the product included): the
        // log-odds less the features' pulls is the same constant (the bias) at any moment.
        let moments = [8.5, 11, 15, 23].map { hour in
            refitted.estimate(OpenPredictor.features(of: "news", at: t + hour * 3600, in: history, horizon: 3600))
        }
        let biases = moments.map { log($0.probability / (1 - $0.probability)) - $0.contributions.reduce(0, +) }
        for bias in biases { #expect(abs(bias - biases[0]) < 1e-6, "\(biases)") }
    }
}

/// Newton's method on weighted examples: the optimum, and no run-away when a feature separates.
struct LogisticFitTests {
    /// Examples drawn (with a fixed generator) from a known model are fitted back to it.
    @Test func recoversTheWeightsThatMadeTheExamples() {
        var examples = ExampleRows(width: 3)
        var state: UInt64 = 42
        func uniform() -> Double {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Double(state >> 11) / Double(1 << 53)
        }
        let truth = [-1.0, 2.0, -0.5]
        for _ in 0..<20000 {
            let (a, b) = (uniform() * 4 - 2, uniform() * 4 - 2)
            let p = 1 / (1 + exp(-(truth[0] + truth[1] * a + truth[2] * b)))
            examples.append([1, a, b], label: uniform() < p ? 1 : 0, weight: 1)
        }
        let fit = LogisticFit(examples, ridge: 0)
        let start = [0.0, 0, 0]
        let solved = fit.solve(from: start)
        for (w, t) in zip(solved, truth) { #expect(abs(w - t) < 0.1, "\(solved)") }
        #expect(fit.loss(solved) < fit.loss(start))
    }

    /// A feature that separates the labels perfectly: without the ridge the optimum is at
    /// infinity; with it the weights stay finite and the loss still falls.
    @Test func aSeparatingFeatureDoesNotRunAway() {
        var examples = ExampleRows(width: 2)
        for i in 0..<200 {
            let x = Double(i % 2 == 0 ? 1 : -1)
            examples.append([1, x], label: x > 0 ? 1 : 0, weight: i % 2 == 0 ? 1 : 10)
        }
        let fit = LogisticFit(examples, ridge: 1)
        let solved = fit.solve(from: [0, 0])
        #expect(solved.allSatisfy { $0.isFinite })
        #expect(solved[1] > 1 && solved[1] < 50, "\(solved)")
        #expect(fit.loss(solved) < fit.loss([0, 0]))
    }

    @Test func aSingularSystemHasNoSolution() {
        #expect(solveLinearSystem([1, 2, 2, 4], [1, 1], 2) == nil)
        #expect(solveLinearSystem([2, 0, 0, 4], [2, 8], 2) == [1, 2])
    }
}

/// The frontier: every planner under the same online budget, scored strictly.
struct FrontierTests {
    /// A small trace in which one app is opened each morning and another an hour after each
    /// open of the first: the learned planner finds both, the budget holds.
    func habitTrace(days: Int = 21) -> AppOpenTrace {
        var opens: [AppOpenTrace.Key: [Date]] = [:]
        let start = 1_700_000_000.0
        for d in 0..<days {
            let morning = start + Double(d) * 86400 + 7 * 3600 + Double((d * 37) % 900)
            opens[.init(user: "u", app: "news"), default: []].append(Date(timeIntervalSince1970: morning))
            opens[.init(user: "u", app: "mail"), default: []].append(Date(timeIntervalSince1970: morning + 4000))
            opens[.init(user: "u", app: "chat"), default: []].append(
                Date(timeIntervalSince1970: start + Double(d) * 86400 + Double((d * 7919) % 86400)))
        }
        return AppOpenTrace(opens: opens)
    }

    @Test(arguments: FrontierReplay.Planner.allCases)
    func everyPlannerKeepsTheBudgetOnline(planner: FrontierReplay.Planner) {
        let trace = habitTrace()
        for k in [0.5, 1, 2] {
            let wakes = FrontierReplay().wakes(for: trace, planner: planner, wakesPerOpen: k)
            let total = wakes.values.reduce(0) { $0 + $1.count }
            // Never more than K per open, plus the half day a morning may borrow.
            #expect(Double(total) <= k * Double(trace.openCount) + k * 1.5 + 1, "\(planner) at \(k): \(total)")
        }
    }

    /// One walk for several budgets gives each budget exactly the wakes of a replay of it alone
    /// (what `--frontier` and the dev-trace test below rely on).
    @Test(arguments: FrontierReplay.Planner.allCases)
    func oneWalkServesEveryBudgetAsItsOwnReplayWould(planner: FrontierReplay.Planner) {
        let trace = habitTrace(days: 28)
        let budgets = [0.5, 1, 2, 4]
        let together = FrontierReplay().wakes(for: trace, planner: planner, budgets: budgets)
        #expect(together.count == budgets.count)
        for (k, wakes) in zip(budgets, together) {
            #expect(
                wakes == FrontierReplay().wakes(for: trace, planner: planner, wakesPerOpen: k), "\(planner) at \(k)")
        }
        // The budgets differ, and so do their wakes: the walk did not hand one budget's to all.
        #expect(together[0] != together[3], "\(planner)")
        #expect(FrontierReplay().wakes(for: trace, planner: planner, budgets: []).isEmpty)
    }

    @Test func theLearnedPlannerCoversAHabitTheBaselinesMiss() {
        let trace = habitTrace(days: 28)
        func fresh(_ planner: FrontierReplay.Planner) -> Double {
            FreshnessScore.strict(
                trace: trace, wakes: FrontierReplay().wakes(for: trace, planner: planner, wakesPerOpen: 1)
            ).freshWithin60Minutes
        }
        let learned = fresh(.learned)
        #expect(learned > 0.5, "\(learned)")
        #expect(learned >= fresh(.reopen), "\(learned) vs \(fresh(.reopen))")
        #expect(learned >= fresh(.hourOfDay), "\(learned) vs \(fresh(.hourOfDay))")
    }

    /// Bad or thin input: one open, one day, opens years apart — no crash, no wake beyond budget.
    @Test func thinTracesAreHandled() {
        let once = AppOpenTrace(opens: [.init(user: "u", app: "a"): [Date(timeIntervalSince1970: 1_700_000_000)]])
        for planner in FrontierReplay.Planner.allCases {
            let wakes = FrontierReplay().wakes(for: once, planner: planner, wakesPerOpen: 4)
            #expect(wakes.values.reduce(0) { $0 + $1.count } == 0)
        }
        let apart = AppOpenTrace(opens: [
            .init(user: "u", app: "a"): [1_500_000_000, 1_500_000_600, 1_700_000_000].map(
                Date.init(timeIntervalSince1970:))
        ])
        let wakes = FrontierReplay().wakes(for: apart, planner: .learned, wakesPerOpen: 2)
        #expect(wakes.values.reduce(0) { $0 + $1.count } <= 8)
    }

    /// The strict score takes the worse of the wakes as written and one second earlier.
    @Test func theStrictScoreDoesNotRewardWakesOnTheOpen() {
        let open = Date(timeIntervalSince1970: 1_700_000_000)
        let key = AppOpenTrace.Key(user: "u", app: "a")
        let opens = (0..<12).map { open.addingTimeInterval(Double($0) * 86400) }
        let trace = AppOpenTrace(opens: [key: opens])
        // Wakes exactly 60 minutes before each open: fresh as written, 60 min + 1 s one second earlier.
        let wakes = [key: opens.map { $0.addingTimeInterval(-3600) }]
        #expect(FreshnessScore(trace: trace, wakes: wakes).freshWithin60Minutes == 1)
        #expect(FreshnessScore.strict(trace: trace, wakes: wakes).freshWithin60Minutes == 0)
    }

    /// On the dev trace (virtual time, strict scoring): the learned planner above both baselines
    /// at every budget, within it, and no lower than measured (0.629 / 0.687 / 0.741 / 0.845 at
    /// 1× / 1.5× / 2× / 4×; 0.624 / 0.688 / 0.730 / 0.845 before the estimates were checked by
    /// time of day, 0.593 / 0.657 / 0.695 / 0.818 before session 11's daily refit). Issue 16's
    /// bars at 1× and 2× (0.62, 0.74) are met and held; those at 1.5× (0.69, and a median age of
    /// 45 min) and 4× (0.85) are not reached yet: known issues, with the figures.
    @Test func theDevTraceFrontier() async throws {
        let points = [(1.0, 0.62, 0.62), (1.5, 0.68, 0.69), (2.0, 0.74, 0.74), (4.0, 0.835, 0.85)]
        let oracle = try await DevTrace.replaying { trace in
            FreshnessScore(trace: trace, wakes: TraceReplay().wakes(for: trace, policy: .oracle))
        }
        // One walk per planner serves the three budgets; one thread per planner: the walks are
        // independent, and once the suite's other tests are done this one has every core.
        let planners: [FrontierReplay.Planner] = [.learned, .hourOfDay, .reopen]
        let byPlanner = try await withThrowingTaskGroup(of: (Int, [FreshnessScore]).self) { group in
            for (index, planner) in planners.enumerated() {
                group.addTask {
                    let scores = try await DevTrace.replaying { trace in
                        FrontierReplay(history: .init(utcOffset: .seconds(-4 * 3600)))
                            .wakes(for: trace, planner: planner, budgets: points.map(\.0))
                            .map { FreshnessScore.strict(trace: trace, wakes: $0) }
                    }
                    return (index, scores)
                }
            }
            return try await group.reduce(into: [[FreshnessScore]](repeating: [], count: planners.count)) {
                $0[$1.0] = $1.1
            }
        }
        let scores = points.indices.map { point in planners.indices.map { byPlanner[$0][point] } }
        for ((k, floor, bar), planners) in zip(points, scores) {
            let (learned, hourOfDay, reopen) = (planners[0], planners[1], planners[2])
            #expect(learned.wakesPerUserDay <= k * oracle.wakesPerUserDay * 1.03, "at \(k)×")
            #expect(learned.freshWithin60Minutes >= floor, "at \(k)×")
            #expect(learned.freshWithin60Minutes > hourOfDay.freshWithin60Minutes, "at \(k)×")
            #expect(learned.freshWithin60Minutes > reopen.freshWithin60Minutes, "at \(k)×")
            if k == 1.5 {
                withKnownIssue("issue 16's median age at 1.5×: \(learned.medianAge.seconds / 60) min of 45") {
                    #expect(learned.medianAge <= .seconds(45 * 60))
                }
            }
            if floor >= bar { continue }  // the bar is the floor: met, and held above
            withKnownIssue("issue 16's bar at \(k)×: \(learned.freshWithin60Minutes) of \(bar)") {
                #expect(learned.freshWithin60Minutes >= bar)
            }
        }
    }
}
