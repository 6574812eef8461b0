import BackgroundModel
import BackgroundPolicy
import Foundation
import Testing

/// How soon an app that did not handle its transfer events is launched for them again.
struct EventsRelaunchBackoffTests {
    let backoff = EventsRelaunchBackoff()  // two free retries, then 1 min doubling to 1 h
    let start = Date(timeIntervalSince1970: 1_767_571_200)
    /// Now: a day after the start, later than every run's end.
    var later: Date { start.addingTimeInterval(86400) }
    let app = AppID(rawValue: "com.example.a")!

    /// Runs newest first, each ending `n` minutes after the start.
    func runs(_ runs: [(RunTrigger, RunOutcome?, Double)]) -> [RunRecord] {
        runs.enumerated().map { index, run in
            RunRecord(
                id: RunID(rawValue: Int64(100 - index)), app: app, trigger: run.0, startedAt: start,
                deadline: start, endedAt: run.1 == nil ? nil : start.addingTimeInterval(run.2 * 60), outcome: run.1,
                reasons: [], launched: true, detail: nil)
        }
    }

    @Test func theFirstFailuresAreRetriedAtOnce() {
        #expect(backoff.notBefore(now: later, runs: []) == nil)
        #expect(backoff.notBefore(now: later, runs: runs([(.transferEvents, .crashed, 5)])) == nil)
        #expect(
            backoff.notBefore(now: later, runs: runs([(.transferEvents, .crashed, 5), (.transferEvents, .expired, 4)]))
                == nil)
    }

    @Test func thenTheWaitDoublesFromAMinuteToAnHour() {
        func wait(afterFailures count: Int) -> Double? {
            let failed = (0..<count).map { (RunTrigger.transferEvents, RunOutcome.crashed, Double(100 - $0)) }
            return backoff.notBefore(now: later, runs: runs(failed)).map { $0.timeIntervalSince(start) / 60 - 100 }
        }
        #expect(wait(afterFailures: 3) == 1)
        #expect(wait(afterFailures: 4) == 2)
        #expect(wait(afterFailures: 5) == 4)
        #expect(wait(afterFailures: 9) == 60)
        #expect(wait(afterFailures: 40) == 60, "never more than an hour")
    }

    @Test func aRunThatHandledItsEventsResetsTheCountAndOtherRunsAreNotRead() {
        // Newest first: two crashes since a run that handled its events, three before it.
        let history = runs([
            (.transferEvents, .crashed, 50), (.scheduled, .crashed, 49), (.transferEvents, .launchFailed, 48),
            (.transferEvents, .eventsHandled, 40),
            (.transferEvents, .crashed, 30), (.transferEvents, .crashed, 20), (.transferEvents, .crashed, 10),
        ])
        #expect(
            backoff.notBefore(now: later, runs: history) == nil, "a fetch that crashed is the fetch policy's business")
    }

    @Test func runsBgdCutShortItselfNeitherCountNorReset() {
        let history = runs([
            (.transferEvents, .interrupted, 60), (.transferEvents, nil, 0), (.transferEvents, .crashed, 30),
            (.transferEvents, .cancelled, 25), (.transferEvents, .crashed, 20), (.transferEvents, .expired, 10),
        ])
        #expect(
            backoff.notBefore(now: later, runs: history) == start.addingTimeInterval(31 * 60),
            "a minute after the newest failure")
    }

    @Test func noFreeRetriesAndOddSettingsStaySensible() {
        let strict = EventsRelaunchBackoff(freeRetries: -3, base: .seconds(10), maximum: .seconds(1))
        #expect(strict.freeRetries == 0 && strict.maximum == .seconds(10))
        #expect(
            strict.notBefore(now: later, runs: runs([(.transferEvents, .crashed, 1)])) == start.addingTimeInterval(70))
    }

    /// A wall clock set back a day after the failures: the wait counts from now, not from an end
    /// that now lies a day ahead (the events waited that long, with no bound).
    @Test func aClockSetBackWaitsNoLongerThanTheWait() {
        let failed = (0..<3).map { (RunTrigger.transferEvents, RunOutcome.crashed, Double(100 - $0)) }
        let setBack = start.addingTimeInterval(100 * 60 - 86400)
        #expect(backoff.notBefore(now: setBack, runs: runs(failed)) == setBack.addingTimeInterval(60))
    }
}
