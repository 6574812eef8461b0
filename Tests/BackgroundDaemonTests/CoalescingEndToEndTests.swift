import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// Two apps due three minutes apart are woken in one wake-up of the live daemon.
@Suite(.timeLimit(.minutes(5)))
struct CoalescingEndToEndTests {
    static let start = Date(timeIntervalSince1970: 1_767_603_600)

    @Test func appsDueWithinTheLeewayStartTogether() async throws {
        try await TestDaemon.with(clock: ManualClock(now: Self.start)) { daemon in
            let fixture = [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"]
            try await daemon.register("com.example.early", command: fixture, interval: .every(.seconds(30 * 60)))
            try await daemon.register("com.example.late", command: fixture, interval: .every(.seconds(33 * 60)))
            let planned = try await daemon.plannedWake(of: "com.example.early") {
                $0.reasons.contains { $0.code == .coalesced }
            }
            #expect(planned == Self.start.addingTimeInterval(33 * 60))

            // At the early app's own due time nothing starts (setting its interval again makes
            // the scheduler plan then).
            daemon.clock.advance(to: Self.start.addingTimeInterval(30 * 60))
            _ = try await daemon.waitFor(
                { activity -> Bool? in
                    if case .planned(let launched, _) = activity { return launched.isEmpty }
                    return nil
                },
                after: {
                    _ = try await daemon.admin.send(
                        .put, "/v1/apps/com.example.early/fetch-interval",
                        body: FetchIntervalUpdate(interval: .every(.seconds(30 * 60))),
                        as: AppSummary.self)
                })
            #expect(try await daemon.store.runsInFlight().isEmpty)

            let ended = try await daemon.waitFor(
                { activity -> RunRecord? in
                    if case .runEnded(let run) = activity, run.app.rawValue == "com.example.late" { return run }
                    return nil
                }, after: { daemon.clock.advance(to: Self.start.addingTimeInterval(33 * 60)) })
            try await daemon.waitUntil { try await daemon.store.runsInFlight().isEmpty }
            let early = try await daemon.admin.send(.get, "/v1/apps/com.example.early/history", as: [RunRecord].self)
            #expect(early.map(\.startedAt) == [Self.start.addingTimeInterval(33 * 60)])
            #expect(ended.startedAt == Self.start.addingTimeInterval(33 * 60))
            #expect(early.first?.reasons.contains { $0.code == .coalesced } == true)
        }
    }
}
