import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import NIOHTTP1
import Testing

/// The whole daemon under a virtual clock for days: the seed's promise on a live bgd.
@Suite(.timeLimit(.minutes(5)))
struct AdaptiveSchedulingTests {
    /// Monday 2026-01-05 00:00 UTC.
    static let monday = Date(timeIntervalSince1970: 1_767_571_200)
    static let app = "com.example.noon"

    func fixture(_ arguments: String...) throws -> [String] {
        [try BuiltProducts.path(of: "bgd-fixture-app")] + arguments
    }

    /// Moves the clock to `date` and waits until the scheduler has planned at that time and no run
    /// is in flight. Changing the interval to what it is rings the scheduler, so it plans even when
    /// nothing was due.
    func step(_ daemon: TestDaemon, to date: Date) async throws {
        _ = try await daemon.waitFor(
            { activity -> Bool? in
                if case .planned = activity { return true }
                return nil
            },
            after: {
                daemon.clock.advance(to: date)
                _ = try await daemon.admin.send(
                    .put, "/v1/apps/\(Self.app)/fetch-interval", body: FetchIntervalUpdate(interval: .minimum),
                    as: AppSummary.self)
            })
        try await daemon.waitUntil { try await daemon.store.runsInFlight().isEmpty }
    }

    @Test func anAppOpenedEveryDayAtNoonIsFetchedShortlyBeforeNoonFromTheThirdDay() async throws {
        try await TestDaemon.with(usage: .init(planning: .adaptive), clock: ManualClock(now: Self.monday)) { daemon in
            try await daemon.register(Self.app, command: try fixture("newData"), interval: .minimum)
            var time = Self.monday
            for day in 0..<6 {
                let noon = Self.monday.addingTimeInterval(Double(day) * 86400 + 12 * 3600)
                while time < noon {
                    time = time.addingTimeInterval(600)
                    try await step(daemon, to: time)
                }
                _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/opens")
            }
            let runs = try await daemon.admin.send(
                .get, "/v1/apps/\(Self.app)/history?limit=1000", as: [RunRecord].self)
            let scheduled = runs.filter { $0.trigger == .scheduled }
            for day in 2..<6 {
                let noon = Self.monday.addingTimeInterval(Double(day) * 86400 + 12 * 3600)
                let before = scheduled.filter {
                    $0.startedAt >= noon.addingTimeInterval(-20 * 60) && $0.startedAt < noon
                }
                #expect(before.count == 1, "day \(day): \(scheduled.map(\.startedAt))")
                #expect(before.first?.reasons.map(\.code).contains(.predictedOpen) == true)
            }
            // The habit is the only reason to wake it: no more than a wake or two a day.
            let afterLearning = scheduled.filter { $0.startedAt >= Self.monday.addingTimeInterval(2 * 86400) }
            #expect(afterLearning.count <= 8, "\(afterLearning.map(\.startedAt))")

            // `bgctl why` and `bgctl forecast` give the reasons on the live daemon.
            let why = try await daemon.why(Self.app)
            #expect(
                why.reasons.contains {
                    [.predictedOpen, .stillFresh, .noLikelyOpen, .closerToTheOpen].contains($0.code)
                }, "\(why.reasons)")
            let output = try await Command.run(
                try BuiltProducts.path(of: "bgctl"),
                ["forecast", Self.app, "--hours", "24", "--socket", daemon.socketPath])
            #expect(output.status == 0, "\(output.standardError)")
            #expect(
                output.standardOutput.contains("predictedOpen")
                    || output.standardOutput.contains("session starts expected"), "\(output.standardOutput)")
            // Each planned wake reads as the README says times read: "in 11h40m (2026-01-…)",
            // counted from bgd's clock (this daemon's is virtual), not a raw ISO timestamp.
            let wakeLines = output.standardOutput.split(separator: "\n").filter { $0.hasPrefix("  in ") }
            #expect(!wakeLines.isEmpty && !output.standardOutput.contains("Z  "), "\(output.standardOutput)")
            let forecast = try await daemon.admin.send(
                .get, "/v1/apps/\(Self.app)/forecast?hours=24", as: WakeForecast.self)
            let wake = try #require(forecast.wakes.first)
            let minute = wake.at.timeIntervalSince(Self.monday).truncatingRemainder(dividingBy: 86400) / 60
            #expect((11 * 60 + 40..<12 * 60).contains(minute), "\(wake.at)")
        }
    }

    @Test func anAppNeverOpenedGetsTheRareWakesOfAnUnusedApp() async throws {
        try await TestDaemon.with(
            fetchPolicy: .init(unusedAppInterval: .seconds(6 * 3600)), clock: ManualClock(now: Self.monday)
        ) { daemon in
            try await daemon.register(Self.app, command: try fixture("newData"), interval: .minimum)
            let due = try await daemon.plannedWake(of: Self.app)
            #expect(due == Self.monday.addingTimeInterval(6 * 3600))
            #expect(try await daemon.why(Self.app).reasons.map(\.code).contains(.rarelyUsed))
        }
    }

    @Test func forecastRefusesBadHours() async throws {
        try await TestDaemon.with { daemon in
            try await daemon.register(Self.app, command: try fixture("newData"), interval: .minimum)
            for hours in ["0", "169", "lots"] {
                let answer = try await RawHTTP.request(
                    daemon.socketPath, .GET, "/v1/apps/\(Self.app)/forecast?hours=\(hours)")
                #expect(answer.status == 400, "\(hours)")
                #expect(answer.errorCode == "invalidQuery")
            }
        }
    }
}
