import BackgroundModel
import Foundation
import Testing

/// Durations on the wire are seconds, a number (docs/api.md) — never Swift's own coding of a
/// `Duration`, its two 64-bit words (`[195, 2884905626637434880]`), which no client can read.
struct WireDurationTests {
    static func object(_ value: some Encodable) throws -> [String: Any] {
        try #require(JSONSerialization.jsonObject(with: try WireCoding.makeEncoder().encode(value)) as? [String: Any])
    }

    @Test func usageSaysWithinInSeconds() throws {
        let usage = UsageSummary(
            app: AppID(rawValue: "com.example.a")!, opensRecorded: 3, firstOpen: nil, lastOpen: nil, opensPerDay: 1,
            sessionsPerDay: 1, busiestSlots: [],
            openChance: .init(probability: 0.25, within: .milliseconds(3_600_500), threshold: 0.3, factors: []))
        let chance = try #require(try Self.object(usage)["openChance"] as? [String: Any])
        #expect(chance["within"] as? Double == 3600.5, "\(chance)")
        let encoded = try WireCoding.makeEncoder().encode(usage)
        #expect(try WireCoding.makeDecoder().decode(UsageSummary.self, from: encoded) == usage)
    }

    /// The event stream's budgets too: `{"fetch": {"run": R, "budget": 30}}` as docs/api.md shows,
    /// read back; and an event an earlier bgd stored in its outbox in Swift's coding still reads.
    @Test func eventBudgetsAreSeconds() throws {
        let bodies: [AppEvent.Body] = [
            .fetch(run: RunID(3), budget: .seconds(30)),
            .remoteNotification(run: RunID(4), payload: "{}", budget: .seconds(30), apnsID: "A"),
            .backgroundTask(
                run: RunID(5), identifier: "com.example.a.refresh", kind: .appRefresh, budget: .seconds(600)),
        ]
        for body in bodies {
            let object = try Self.object(body)
            let fields = try #require(object.values.first as? [String: Any])
            #expect(fields["budget"] as? Double == (body == bodies.last ? 600 : 30), "\(object)")
            let encoded = try WireCoding.makeEncoder().encode(body)
            #expect(try WireCoding.makeDecoder().decode(AppEvent.Body.self, from: encoded) == body)
        }
        let documented =
            #"{"event":{"seq":7,"createdAt":"2026-01-05T09:00:00.000Z","body":{"fetch":{"run":3,"budget":30}}}}"#
        #expect(
            try WireCoding.makeDecoder().decode(StreamMessage.self, from: Data(documented.utf8))
                == .event(
                    AppEvent(
                        seq: EventSequence(7), createdAt: Date(timeIntervalSince1970: 1_767_603_600),
                        body: .fetch(run: RunID(3), budget: .seconds(30)))))
        let swiftCoding = String(decoding: try JSONEncoder().encode(Duration.seconds(30)), as: UTF8.self)
        let stored = #"{"fetch":{"run":3,"budget":"# + swiftCoding + "}}"
        #expect(
            try WireCoding.makeDecoder().decode(AppEvent.Body.self, from: Data(stored.utf8))
                == .fetch(run: RunID(3), budget: .seconds(30)))
    }
}
