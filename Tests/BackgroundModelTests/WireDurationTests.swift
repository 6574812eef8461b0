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

    /// A date read back and written again is the same text (a client that decodes an answer and
    /// encodes it again must not move its times), and is the date cut to its millisecond.
    @Test func datesSurviveARoundTripToTheMillisecond() throws {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<10_000 {
            let date = Date(timeIntervalSince1970: Double.random(in: -2e9...4e9, using: &generator))
            let written = WireCoding.format(date)
            let again = try #require(WireCoding.parse(written))
            #expect(WireCoding.format(again) == written, "\(date.timeIntervalSince1970)")
            #expect(abs(again.timeIntervalSince1970 - date.timeIntervalSince1970) < 0.001, "\(written)")
        }
        #expect(WireCoding.format(Date(timeIntervalSince1970: 1_795_851_614.2365)) == "2026-11-28T07:40:14.236Z")
        #expect(WireCoding.format(Date(timeIntervalSince1970: 1_767_603_600)) == "2026-01-05T09:00:00.000Z")
        #expect(WireCoding.format(Date(timeIntervalSince1970: 1_767_603_600.05)) == "2026-01-05T09:00:00.050Z")
        #expect(WireCoding.format(Date(timeIntervalSince1970: -0.5)) == "1969-12-31T23:59:59.500Z")
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
