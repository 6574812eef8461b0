import BackgroundModel
import BackgroundPolicy
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The trace shipped in the repository (Traces/README.md says where it comes from).
enum DevTrace {
    static let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Traces/studentlife-dev.csv")

    static func load() throws -> AppOpenTrace {
        try AppOpenTrace.parse(csv: String(contentsOf: url, encoding: .utf8)).get()
    }

    /// Replays of the whole trace take seconds to minutes of CPU in a debug build (the frontier,
    /// minutes): they run on a thread of their own at the lowest priority (nice 19; on Linux a
    /// thread's own), so they neither hold one of the test runner's cooperative threads (as many
    /// as cores, two here) nor take a core from the tests that run real daemons against time
    /// limits — they use what CPU the others leave. Expectations are checked afterwards, on the
    /// test's task.
    static func replaying<T: Sendable>(_ body: @escaping @Sendable (AppOpenTrace) throws -> T) async throws -> T {
        let trace = try load()
        return try await withCheckedThrowingContinuation { continuation in
            Thread {
                #if os(Linux)
                    _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 19)
                #endif
                continuation.resume(with: Result { try body(trace) })
            }.start()
        }
    }
}

struct FreshnessScoreTests {
    func minutes(_ duration: Duration) -> Double { (duration.seconds / 60 * 10).rounded() / 10 }

    /// The reference figures of the trace README, computed by its score.py: our scoring agrees.
    @Test(arguments: [
        (TraceReplay.Policy.openOnly, 160.0, 1538.5, 0.299, 0.0),
        (.fixed60m, 27.2, 52.1, 1.0, 1651.0),
        (.fixed15m, 7.1, 12.2, 1.0, 6600.7),
        (.oracle, 1.0, 1.0, 1.0, 49.2),
    ])
    func referencePoliciesReproduceTheReferenceFigures(
        policy: TraceReplay.Policy, median: Double, p90: Double, fresh60: Double, wakesPerUserDay: Double
    ) async throws {
        let score = try await DevTrace.replaying { trace in
            FreshnessScore(trace: trace, wakes: TraceReplay().wakes(for: trace, policy: policy))
        }
        #expect(score.opensScored == 2988)
        #expect(minutes(score.medianAge) == median)
        #expect(minutes(score.p90Age) == p90)
        #expect((score.freshWithin60Minutes * 1000).rounded() / 1000 == fresh60)
        #expect((score.wakesPerUserDay * 10).rounded() / 10 == wakesPerUserDay)
    }

    @Test func agesFollowTheRules() {
        let start = Date(timeIntervalSince1970: 1_767_603_600)
        func at(days: Double, minutes: Double = 0) -> Date { start.addingTimeInterval(days * 86400 + minutes * 60) }
        let key = AppOpenTrace.Key(user: "u", app: "a")
        // Opens: day 0 (warm-up), day 8 at 0 and 90 min, day 9 at 0 (user's last open).
        let trace = AppOpenTrace(opens: [key: [at(days: 0), at(days: 8), at(days: 8, minutes: 90), at(days: 9)]])
        // A wake 10 min before the second day-8 open; one during warm-up; one after the end (not counted).
        let wakes = [key: [at(days: 1), at(days: 8, minutes: 80), at(days: 10)]]
        let score = FreshnessScore(trace: trace, wakes: wakes)
        // Scored: day 8 (age 8 days − 0 = from day 1 wake: 7 days), +90 min (age 10), day 9 (age 22.5 h).
        #expect(score.opensScored == 3)
        #expect(minutes(score.medianAge) == 22.5 * 60)
        #expect(score.freshWithin15Minutes == 1.0 / 3)
        // One wake after warm-up (day 8 + 80 min) over 2 scored days.
        #expect(score.wakesPerUserDay == 0.5)
    }
}

struct AppOpenTraceTests {
    @Test func parsesInAnyOrderAndSorts() throws {
        let trace = try AppOpenTrace.parse(csv: "app,user,open_utc\nmail,u1,1364099483\nmail,u1,1364095883\n\n").get()
        let opens = try #require(trace.opens[AppOpenTrace.Key(user: "u1", app: "mail")])
        #expect(opens.map(\.timeIntervalSince1970) == [1_364_095_883, 1_364_099_483])
    }

    @Test(arguments: [
        ("", "the trace is empty"),
        ("user,app\nu,a", "the header must name the columns user, app and open_utc"),
        ("user,app,open_utc\nu,a", "line 2: expected 3 fields"),
        ("user,app,open_utc\nu,a,yesterday", "line 2: open_utc must be Unix seconds"),
        ("user,app,open_utc\nu,a,1364095883000", "line 2: open_utc must be Unix seconds"),
        ("user,app,open_utc\n,a,1364095883", "line 2: user and app must not be empty"),
        ("user,app,open_utc\n", "the trace is empty"),  // a header alone scored as a perfect 0 minutes
        ("user,app,open_utc\nu,a,nan", "line 2: open_utc must be Unix seconds"),
        ("user,app,open_utc\nu,a,inf", "line 2: open_utc must be Unix seconds"),
    ])
    func refusesMalformedTracesWithTheLine(text: String, message: String) {
        guard case .failure(let error) = AppOpenTrace.parse(csv: text) else {
            Issue.record("accepted: \(text)")
            return
        }
        #expect(error.description.hasPrefix(message), "\(error)")
    }

    /// What a spreadsheet exports reads as written: a byte-order mark, Windows line ends, an empty
    /// column after the last; a line repeated exactly is one open (a second copy scored as an
    /// open of content 0 minutes old, flattering every policy).
    @Test func aSpreadsheetsExportReadsAndARepeatedLineCountsOnce() throws {
        let trace = try AppOpenTrace.parse(
            csv: "\u{FEFF}user,app,open_utc,\r\nu1,mail,1364095883,\r\nu1,mail,1364095883,\r\nu1,mail,1364099483,\r\n"
        ).get()
        let opens = try #require(trace.opens[AppOpenTrace.Key(user: "u1", app: "mail")])
        #expect(opens.map(\.timeIntervalSince1970) == [1_364_095_883, 1_364_099_483])
        #expect(trace.openCount == 2)
    }

    /// A 10 MB field is quoted as a short excerpt, not echoed back (D14).
    @Test func anErrorQuotesAShortExcerpt() {
        let huge = String(repeating: "x", count: 10 << 20)
        for text in ["user,app,open_utc\nu,a,\(huge)", "user,app,\(huge)\nu,a,1"] {
            guard case .failure(let error) = AppOpenTrace.parse(csv: text) else {
                Issue.record("accepted")
                continue
            }
            #expect(error.description.count < 400, "\(error.description.count) characters")
        }
    }

    /// The replay's cost follows the opens, not the calendar: two opens 22 years apart take a
    /// handful of planning steps, not a million (D14). Counted in grid decisions, not timed.
    @Test func aReplayOfOpensYearsApartCostsWhatItsOpensCost() throws {
        let trace = try AppOpenTrace.parse(csv: "user,app,open_utc\nu,a,978307200\nu,a,1672531200\n").get()
        let replay = TraceReplay()
        let decisions = replay.adaptiveDecisionCount(for: trace)
        #expect(decisions < 5_000, "\(decisions) planning passes")
        #expect((replay.wakes(for: trace, policy: .adaptive).values.first ?? []).count < 5_000)
        // A timer, too, does not wake for the 22 years the user was away (770,000 wakes).
        #expect((replay.wakes(for: trace, policy: .fixed15m).values.first ?? []).count < 1_000)
    }
}

struct AdaptiveReplayTests {
    /// Where the adaptive policy stands on the real trace, in the same replay the benchmark runs
    /// (`bgctl simulate trace Traces/studentlife-dev.csv --utc-offset=-4`). The issue's bar —
    /// 0.70 fresh within 60 minutes, median ≤ 45 minutes at the oracle's wakes — is not met (see
    /// docs/scheduling.md); this pins what is, so a change that loses ground fails.
    @Test func adaptiveSpendsNoMoreThanTheOracleAndKeepsItsGround() async throws {
        let (adaptive, oracle, openOnly) = try await DevTrace.replaying { trace in
            let replay = TraceReplay(learning: .init(usage: .init(utcOffset: .seconds(-4 * 3600))))
            return (
                FreshnessScore(trace: trace, wakes: replay.wakes(for: trace, policy: .adaptive)),
                FreshnessScore(trace: trace, wakes: replay.wakes(for: trace, policy: .oracle)),
                FreshnessScore(trace: trace, wakes: replay.wakes(for: trace, policy: .openOnly))
            )
        }
        #expect(adaptive.wakesPerUserDay <= oracle.wakesPerUserDay)
        #expect(adaptive.freshWithin60Minutes >= 0.56, "\(adaptive.freshWithin60Minutes)")
        #expect(adaptive.freshWithin60Minutes > openOnly.freshWithin60Minutes + 0.25)
        #expect(adaptive.medianAge <= .seconds(60 * 60))
    }

    /// Issue 3's bar, asserted as written. It is not met yet, so it is a known issue: this test
    /// passes while the bar fails, and fails — asking for the wrapper to go — the day a change
    /// meets it.
    @Test func theIssueBar() async throws {
        let (adaptive, oracle) = try await DevTrace.replaying { trace in
            let replay = TraceReplay(learning: .init(usage: .init(utcOffset: .seconds(-4 * 3600))))
            return (
                FreshnessScore(trace: trace, wakes: replay.wakes(for: trace, policy: .adaptive)),
                FreshnessScore(trace: trace, wakes: replay.wakes(for: trace, policy: .oracle))
            )
        }
        #expect(adaptive.wakesPerUserDay <= oracle.wakesPerUserDay)
        withKnownIssue(
            "issue 3's bar: ≥ 0.70 fresh within 60 min and median age ≤ 45 min; adaptive reaches 0.575 and 60 min"
        ) {
            #expect(adaptive.freshWithin60Minutes >= 0.70)
            #expect(adaptive.medianAge <= .seconds(45 * 60))
        }
    }

    /// The policy holds on traces it was not shaped on: each user alone, and the whole trace
    /// moved by 5 h 7 min (another time zone, another phase of the 20-minute logging grid).
    @Test func holdsOnEachUserAndOnAShiftedTrace() async throws {
        let scores = try await DevTrace.replaying { trace in
            let shifted = AppOpenTrace(
                opens: trace.opens.mapValues { $0.map { $0.addingTimeInterval(5 * 3600 + 7 * 60) } })
            let variants =
                [shifted] + trace.users.map { user in AppOpenTrace(opens: trace.opens.filter { $0.key.user == user }) }
            return variants.map { variant in
                let replay = TraceReplay()
                return (
                    FreshnessScore(trace: variant, wakes: replay.wakes(for: variant, policy: .adaptive)),
                    FreshnessScore(trace: variant, wakes: replay.wakes(for: variant, policy: .oracle))
                )
            }
        }
        for (adaptive, oracle) in scores {
            #expect(adaptive.wakesPerUserDay <= oracle.wakesPerUserDay)
            #expect(adaptive.freshWithin60Minutes >= 0.53, "\(adaptive.freshWithin60Minutes)")
        }
    }

    /// More budget buys more freshness: the threshold follows the budget, not a fitted constant.
    @Test func freshnessFollowsTheBudget() async throws {
        let (lean, rich) = try await DevTrace.replaying { trace in
            func score(_ wakesPerOpen: Double) -> FreshnessScore {
                let replay = TraceReplay(planner: .init(wakesPerOpen: wakesPerOpen))
                return FreshnessScore(trace: trace, wakes: replay.wakes(for: trace, policy: .adaptive))
            }
            return (score(0.5), score(1.5))
        }
        #expect(lean.wakesPerUserDay < rich.wakesPerUserDay / 2)
        #expect(lean.freshWithin60Minutes < rich.freshWithin60Minutes)
    }
}
