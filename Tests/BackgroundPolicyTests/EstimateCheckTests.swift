import Foundation
import Testing

@testable import BackgroundPolicy

/// The model checking its own estimates by time of day: a quarter whose estimates did not come
/// true is scaled down, one whose did is scaled up, and only what is known, recent and in the
/// region where wakes are chosen counts.
struct EstimateCheckTests {
    let day = 86400.0
    let hour = 3600.0

    /// Five days on which the model gave "a" an even chance at 02:00 (never opened then) and at
    /// 13:00 (opened at 13:30 each day), and the history of those opens.
    func nightsThatFailAndAfternoonsThatHold() -> (EstimateCheck, OpenHistory) {
        var check = EstimateCheck()
        var history = OpenHistory()
        for d in 1...5 {
            let start = Double(d) * day
            check.record("a", at: start + 2 * hour, quarter: EstimateCheck.quarter(of: start + 2 * hour, in: history), estimate: 0.5)
            check.record("a", at: start + 13 * hour, quarter: EstimateCheck.quarter(of: start + 13 * hour, in: history), estimate: 0.5)
            history.recordOpen(of: "a", at: start + 13.5 * hour)
        }
        check.check(upTo: 6 * day, horizon: hour, history: history)
        return (check, history)
    }

    @Test func quartersAreTheLocalDaysNightMorningAfternoonAndEvening() {
        let utc = OpenHistory()
        #expect(EstimateCheck.quarter(of: 10 * day + 2 * hour, in: utc) == 0)
        #expect(EstimateCheck.quarter(of: 10 * day + 6 * hour, in: utc) == 1)
        #expect(EstimateCheck.quarter(of: 10 * day + 13 * hour, in: utc) == 2)
        #expect(EstimateCheck.quarter(of: 10 * day + 23.9 * hour, in: utc) == 3)
        // 03:00 UTC is 23:00 four hours west: the evening there.
        let west = OpenHistory(configuration: .init(utcOffset: .seconds(-4 * 3600)))
        #expect(EstimateCheck.quarter(of: 10 * day + 3 * hour, in: west) == 3)
        #expect(EstimateCheck.quarter(of: -2 * hour, in: utc) == 3, "before 1970 too")
    }

    @Test func aQuarterWhoseEstimatesFailedIsScaledDownAndOneWhoseHeldUp() {
        let (check, _) = nightsThatFailAndAfternoonsThatHold()
        let night = check.factor(0)
        let afternoon = check.factor(2)
        // Expected 2.5 opens in each quarter; none came at night, all five in the afternoons:
        // over the day, 5 of 5 (with 5 opens' worth of prior, 1). Each quarter's own ratio is
        // shrunk toward that by the same prior: (0 + 5) ÷ (2.5 + 5) and (5 + 5) ÷ (2.5 + 5).
        #expect(abs(night - 2.0 / 3) < 1e-9, "\(night)")
        #expect(abs(afternoon - 4.0 / 3) < 1e-9, "\(afternoon)")
        // A quarter with no evidence keeps the day's ratio.
        #expect(abs(check.factor(1) - 1) < 1e-9)
        let scaled = check.scaled(0.3, quarter: 0)
        #expect(scaled.factor == night)
        #expect(abs(scaled.probability - 0.3 * night) < 1e-12)
        #expect(check.scaled(0.9, quarter: 2).probability <= 1, "a chance stays a chance")
    }

    @Test func estimatesBelowTheFloorAreNeitherCheckedNorScaled() {
        var check = EstimateCheck()
        let history = OpenHistory()
        for d in 1...5 { check.record("a", at: Double(d) * day + 2 * hour, quarter: 0, estimate: 0.01) }
        check.check(upTo: 6 * day, horizon: hour, history: history)
        #expect(check.factor(0) == 1, "nothing recorded under the floor")
        let (failing, _) = nightsThatFailAndAfternoonsThatHold()
        #expect(failing.scaled(0.01, quarter: 0) == (0.01, 1))
    }

    @Test func anEstimateIsCheckedOnlyOnceItsHourHasPassed() {
        var check = EstimateCheck()
        var history = OpenHistory()
        check.record("a", at: 2 * hour, quarter: 0, estimate: 0.5)
        check.check(upTo: 2.5 * hour, horizon: hour, history: history)
        #expect(check.factor(0) == 1, "its hour is not over: no verdict yet")
        history.recordOpen(of: "a", at: 2.75 * hour)
        check.check(upTo: 3 * hour, horizon: hour, history: history)
        // Came true: 1 open where 0.5 were expected. The day's ratio is shrunk toward 1 by the
        // prior, (1 + 5) ÷ (0.5 + 5), and the night's toward the day's, so the night is a little
        // above it.
        let day = 6 / 5.5
        #expect(abs(check.factor(0) - (1 + 5 * day) / 5.5 / day) < 1e-9, "\(check.factor(0))")
        check.record("a", at: 13 * hour, quarter: 2, estimate: 0.5)
        check.check(upTo: 14 * hour, horizon: hour, history: history)
        #expect(check.factor(0) > 1)
        #expect(check.factor(2) < 1, "not opened within the hour: it did not come true")
    }

    @Test func onlyTheLastWeekCounts() {
        let (checked, history) = nightsThatFailAndAfternoonsThatHold()
        var check = checked
        #expect(abs(check.factor(0) - 2.0 / 3) < 1e-9)
        // A week and an hour after day 4's estimates: only day 5's are left (0.5 expected at
        // night, none came; 0.5 in the afternoon, one came).
        check.check(upTo: 12 * day, horizon: hour, history: history)
        #expect(abs(check.factor(0) - 5 / 5.5) < 1e-9, "\(check.factor(0))")
        check.check(upTo: 13 * day, horizon: hour, history: history)
        #expect(abs(check.factor(0) - 1) < 1e-9, "a week on, all forgotten")
        #expect(abs(check.factor(2) - 1) < 1e-9)
    }
}

/// `bgctl why` says when the time of day scaled a chance, and by how much.
struct EstimateCheckExplanationTests {
    @Test func theWhySaysWhatTheTimeOfDayDid() {
        let learned = LearnedUsage()
        var estimate = OpenPredictor.Estimate(
            probability: 0.31, contributions: OpenPredictor.Feature.allCases.map { $0 == .hourOfDayRate ? 0.8 : 0 })
        let plain = UsageOutlook.describe(estimate, at: 86400, learned: learned)
        #expect(!plain.contains("time of day"), "\(plain)")
        estimate.timeOfDayFactor = 0.62
        let scaled = UsageOutlook.describe(estimate, at: 86400, learned: learned)
        #expect(scaled.contains("hour of day +0.80"), "\(scaled)")
        #expect(scaled.contains("×0.62 for the time of day"), "\(scaled)")
    }
}
