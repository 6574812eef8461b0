import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// The learned planner on a live bgd (its default): it learns from the opens the store records,
/// with no timer of its own, plans a wake inside the hour before the habit, explains it, and
/// plans the same after a restart (rebuilt from the stored opens).
@Suite(.timeLimit(.minutes(5)))
struct LearnedSchedulingTests {
    /// Monday 2026-01-05 00:00 UTC.
    static let monday = Date(timeIntervalSince1970: 1_767_571_200)
    static let app = "com.example.lunch"

    /// Fourteen days of one open a day at 12:00, recorded with the fetch interval 'never' (so no
    /// run gets in the way), then the interval set to 'minimum' at 08:00 on the fifteenth day.
    func learnTheHabit(_ daemon: TestDaemon) async throws {
        try await daemon.register(
            Self.app, command: [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"], interval: .never)
        for day in 0..<14 {
            daemon.clock.advance(to: Self.monday.addingTimeInterval(Double(day) * 86400 + 12 * 3600))
            _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/opens")
        }
        daemon.clock.advance(to: Self.monday.addingTimeInterval(14 * 86400 + 8 * 3600))
    }

    func planned(_ daemon: TestDaemon) async throws -> (Date, WakeExplanation) {
        _ = try await daemon.admin.send(
            .put, "/v1/apps/\(Self.app)/fetch-interval", body: FetchIntervalUpdate(interval: .minimum),
            as: AppSummary.self)
        let due = try await daemon.plannedWake(of: Self.app) { $0.fetchInterval == .minimum && $0.nextWake != nil }
        return (due, try await daemon.why(Self.app))
    }

    @Test func plansTheWakeWithinTheHourBeforeTheHabitAndSaysWhy() async throws {
        let directory = TemporaryDirectory.make()
        let noon = Self.monday.addingTimeInterval(14 * 86400 + 12 * 3600)
        let first = try await TestDaemon.with(clock: ManualClock(now: Self.monday), directory: directory) { daemon in
            try await learnTheHabit(daemon)
            let (due, why) = try await planned(daemon)
            #expect(due >= noon.addingTimeInterval(-3600) && due < noon, "\(due)")
            let reason = try #require(why.reasons.first { $0.code == .predictedOpen }, "\(why.reasons)")
            #expect(reason.detail.contains("chance of an open within 60 min"), "\(reason.detail)")
            #expect(reason.detail.contains("moved most by"), "\(reason.detail)")

            // `bgctl forecast` plans the same next wake as `bgctl why`.
            let forecast = try await daemon.admin.send(
                .get, "/v1/apps/\(Self.app)/forecast?hours=24", as: WakeForecast.self)
            #expect(forecast.wakes.first?.at == due)

            // `bgctl usage` shows the chance now and what moved it.
            let usage = try await daemon.admin.send(.get, "/v1/apps/\(Self.app)/usage", as: UsageSummary.self)
            let chance = try #require(usage.openChance)
            #expect(chance.probability < chance.threshold, "08:00 is not the habit's hour")
            #expect(!chance.factors.isEmpty)
            // And what the time of day's check scaled it by (1 below the floor of 0.04).
            let factor = try #require(chance.timeOfDayFactor)
            #expect(chance.probability >= 0.04 || factor == 1, "\(chance)")
            return due
        }
        // Restarted on the same state: the model is rebuilt from the stored opens.
        let again = try await TestDaemon.with(
            clock: ManualClock(now: Self.monday.addingTimeInterval(14 * 86400 + 8 * 3600)), directory: directory
        ) { daemon in try await planned(daemon).0 }
        #expect(again == first)
    }

    /// A new install: the model has no day of opens to have learned from. An app opened once is
    /// neither woken on the model's starting guess nor left unwoken (it was, and opening an app
    /// took its wakes away): it is woken as an app never opened is, every 6 hours at most.
    @Test func anAppOpenedBeforeTheModelHasLearnedIsWokenAsOneNeverOpened() async throws {
        // bgd's default for apps with nothing to predict from.
        try await TestDaemon.with(
            fetchPolicy: .init(unusedAppInterval: .seconds(6 * 3600)), clock: ManualClock(now: Self.monday)
        ) { daemon in
            try await daemon.register(
                Self.app, command: [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"], interval: .minimum)
            _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/opens")
            daemon.clock.advance(by: .seconds(600))
            // The open rang the scheduler: wait for the plan that knows of it.
            try await daemon.waitUntil {
                try await daemon.why(Self.app).reasons.contains { $0.detail.contains("learning the user's habits") }
            }
            let why = try await daemon.why(Self.app)
            #expect(!why.reasons.contains { $0.code == .predictedOpen }, "\(why.reasons)")
            #expect(why.reasons.contains { $0.code == .rarelyUsed }, "\(why.reasons)")
            #expect(why.nextWake == Self.monday.addingTimeInterval(6 * 3600), "\(String(describing: why.nextWake))")
            // The forecast's last word says the same cap, as a whole sentence.
            let forecast = try await daemon.admin.send(
                .get, "/v1/apps/\(Self.app)/forecast?hours=24", as: WakeForecast.self)
            #expect(forecast.holdback?.code == .rarelyUsed, "\(String(describing: forecast.holdback))")
            #expect(
                forecast.holdback?.detail.hasSuffix("woken at most every 6h") == true,
                "\(String(describing: forecast.holdback))")
        }
    }

    /// Opens of one app a minute apart or less are one use: an app (or a loop) reporting opens
    /// as fast as it can stores one a minute, and the model learns what the store holds.
    @Test func opensAMinuteApartOrLessCountOnce() async throws {
        try await TestDaemon.with(clock: ManualClock(now: Self.monday)) { daemon in
            try await daemon.register(Self.app, command: ["/bin/false"], interval: .never)
            func usage() async throws -> UsageSummary {
                try await daemon.admin.send(.get, "/v1/apps/\(Self.app)/usage", as: UsageSummary.self)
            }
            for _ in 0..<5 { _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/opens") }
            daemon.clock.advance(by: .seconds(59))
            _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/opens")
            #expect(try await usage().opensRecorded == 1)
            daemon.clock.advance(by: .seconds(1))
            _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/opens")
            let summary = try await usage()
            #expect(summary.opensRecorded == 2)
            #expect(summary.lastOpen == Self.monday.addingTimeInterval(60))
        }
    }

    /// `bgctl why` and `bgctl forecast` name the same next wake for every kind of app — never
    /// opened, on an interval, opened once, fetch turned off — and when the battery holds them
    /// all (issue 18: `why` said "in 5h54m" where `forecast` said none planned).
    @Test func whyAndForecastAgreeOnEveryTier() async throws {
        try await TestDaemon.with(clock: ManualClock(now: Self.monday)) { daemon in
            let fixture = [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"]
            let tiers: [(String, FetchInterval)] = [
                ("com.example.neveropened", .minimum), ("com.example.hourly", .every(.seconds(3600))),
                ("com.example.openedonce", .minimum), ("com.example.off", .never),
            ]
            for (app, interval) in tiers { try await daemon.register(app, command: fixture, interval: interval) }
            _ = try await daemon.admin.send(.post, "/v1/apps/com.example.openedonce/opens")
            daemon.clock.advance(by: .seconds(7200))

            func agree() async throws {
                // Once the plan has caught up: made now, nothing in flight, built on the last
                // run, and nothing due this instant (a due wake is about to start a run).
                try await daemon.waitUntil {
                    let now = daemon.clock.now
                    for (app, _) in tiers {
                        let why = try await daemon.why(app)
                        if why.decidedAt != now || why.running != nil || why.basedOnRun != why.recentRuns.first?.id
                            || (why.nextWake.map { $0 <= now } ?? false)
                        {
                            return false
                        }
                    }
                    return true
                }
                for (app, _) in tiers {
                    let why = try await daemon.why(app)
                    let forecast = try await daemon.admin.send(
                        .get, "/v1/apps/\(app)/forecast?hours=48", as: WakeForecast.self)
                    #expect(
                        forecast.wakes.first?.at == why.nextWake,
                        "\(app): why \(String(describing: why.nextWake)) \(why.reasons.map(\.code)), forecast \(forecast.wakes.map(\.at)) \(String(describing: forecast.holdback))"
                    )
                }
            }
            try await agree()
            #expect(try await daemon.why("com.example.neveropened").nextWake != nil, "woken on the unused-app interval")
            #expect(try await daemon.why("com.example.off").nextWake == nil)
            // The battery runs low: nothing is woken, and both say so.
            _ = try await daemon.admin.send(
                .put, "/v1/env", body: ConditionOverrides(power: .battery, batteryLevel: 10), as: ConditionsReport.self)
            try await daemon.waitUntil { try await daemon.why("com.example.hourly").nextWake == nil }
            try await agree()
        }
    }

    /// A clock a few days fast, set right: the opens after it are learned from. Before, the model
    /// (which learns in time order) dropped every open until the clock caught up with the one
    /// stamped ahead — here an app opened only since was "never opened" to it.
    @Test func opensAfterTheClockWasSetBackAreLearnedFrom() async throws {
        try await TestDaemon.with(clock: ManualClock(now: Self.monday)) { daemon in
            try await learnTheHabit(daemon)
            let later = "com.example.later"
            try await daemon.register(later, command: ["/bin/true"], interval: .never)
            daemon.clock.jump(by: .seconds(3 * 86400))  // fast by three days
            _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/opens")
            daemon.clock.jump(by: .seconds(-3 * 86400 + 3600))  // set right
            _ = try await daemon.admin.send(.post, "/v1/apps/\(later)/opens")
            let usage = try await daemon.admin.send(.get, "/v1/apps/\(later)/usage", as: UsageSummary.self)
            #expect(usage.openChance != nil, "the open after the clock was set back is learned from")
        }
    }
}
