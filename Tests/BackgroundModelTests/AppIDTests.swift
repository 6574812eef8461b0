import BackgroundModel
import Foundation
import Testing

struct AppIDTests {
    @Test(arguments: ["com.example.newsfeed", "a.b", "org.swift-background.app2", "A1.x"])
    func acceptsReverseDNSNames(_ raw: String) {
        #expect(AppID(rawValue: raw)?.rawValue == raw)
    }

    @Test(arguments: [
        "", "newsfeed", "com..example", ".com.example", "com.example.", "1com.example", "com.-example", "com.example-",
        "com.exa mple", "com/example.app", "com.example.app\u{0}", "com.ex\u{e4}mple",
        "com." + String(repeating: "a", count: 64), String(repeating: "a.", count: 128) + "a",
    ])
    func rejectsEverythingElse(_ raw: String) {
        #expect(AppID(rawValue: raw) == nil)
    }

    @Test func decodingValidates() throws {
        let decoder = JSONDecoder()
        #expect(try decoder.decode(AppID.self, from: Data(#""com.example.a""#.utf8)).rawValue == "com.example.a")
        #expect(throws: DecodingError.self) { try decoder.decode(AppID.self, from: Data(#""../../etc""#.utf8)) }
    }
}

struct FetchIntervalTests {
    @Test(arguments: [
        ("never", FetchInterval.never), ("minimum", .minimum), ("MIN", .minimum), ("900", .every(.seconds(900))),
        ("15m", .every(.seconds(900))), ("2h", .every(.seconds(7200))), ("1d", .every(.seconds(86400))),
        ("90s", .every(.seconds(90))),
    ])
    func parsesTheForms(text: String, expected: FetchInterval) {
        #expect(FetchInterval(parsing: text) == expected)
    }

    @Test(arguments: ["", "-5m", "0", "0s", "31d", "soon", "1e9", "15 m", "nan", "5x"])
    func rejectsNonsense(_ text: String) {
        #expect(FetchInterval(parsing: text) == nil)
    }

    @Test func roundTripsThroughJSON() throws {
        for interval in [FetchInterval.never, .minimum, .every(.seconds(1800))] {
            let data = try WireCoding.makeEncoder().encode(interval)
            #expect(try WireCoding.makeDecoder().decode(FetchInterval.self, from: data) == interval)
        }
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(FetchInterval.self, from: Data("-1".utf8)) }
        #expect(throws: DecodingError.self) { try JSONDecoder().decode(FetchInterval.self, from: Data("1e300".utf8)) }
    }
}

struct LaunchCommandTests {
    @Test func refusesWhatExecCannotRun() {
        #expect(LaunchCommand([]) == nil)
        #expect(LaunchCommand([""]) == nil)
        #expect(LaunchCommand(["/bin/echo", "a\u{0}b"]) == nil)
        #expect(LaunchCommand(Array(repeating: "x", count: 257)) == nil)
        #expect(LaunchCommand(["/bin/echo", String(repeating: "x", count: 70_000)]) == nil)
        #expect(LaunchCommand(["/bin/echo", "hello world"])?.description == "/bin/echo 'hello world'")
    }
}

struct StreamMessageTests {
    @Test func eventLinesRoundTrip() throws {
        let messages: [StreamMessage] = [
            .hello(app: AppID(rawValue: "com.example.a")!, launchedForRun: RunID(3)),
            .event(
                AppEvent(
                    seq: EventSequence(7), createdAt: Date(timeIntervalSince1970: 1_767_603_600),
                    body: .fetch(run: RunID(3), budget: .seconds(30)))),
            .control(.expire(run: RunID(3), deadline: Date(timeIntervalSince1970: 1_767_603_630))),
            .control(.exit),
        ]
        for message in messages {
            let line = try WireCoding.makeEncoder().encode(message)
            #expect(!line.contains(UInt8(ascii: "\n")))
            #expect(try WireCoding.makeDecoder().decode(StreamMessage.self, from: line) == message)
        }
    }

    /// The wire format is the one docs/api.md shows: the payload sits right under `event` or
    /// `control`, with no synthesised `_0` level (D13).
    @Test func decodesTheDocumentedLines() throws {
        let decoder = WireCoding.makeDecoder()
        let expiring = #"{"control":{"backgroundTimeExpiring":{"deadline":"2026-01-05T09:00:30.000Z"}}}"#
        #expect(
            try decoder.decode(StreamMessage.self, from: Data(expiring.utf8))
                == .control(.backgroundTimeExpiring(deadline: Date(timeIntervalSince1970: 1_767_603_630))))
        let exit = #"{"control":{"exit":{}}}"#
        #expect(try decoder.decode(StreamMessage.self, from: Data(exit.utf8)) == .control(.exit))
        let fetch =
            #"{"event":{"seq":7,"createdAt":"2026-01-05T09:00:00.000Z","body":{"sessionEventsFinished":{"session":"downloads"}}}}"#
        let decoded = try decoder.decode(StreamMessage.self, from: Data(fetch.utf8))
        guard case .event(let event) = decoded else {
            Issue.record("not an event: \(decoded)")
            return
        }
        #expect(event.seq == EventSequence(7))
        #expect(event.body == .sessionEventsFinished(session: "downloads"))
        let encoded = String(decoding: try WireCoding.makeEncoder().encode(StreamMessage.control(.exit)), as: UTF8.self)
        #expect(encoded == exit)
        #expect(!String(decoding: try WireCoding.makeEncoder().encode(decoded), as: UTF8.self).contains("_0"))
        #expect(throws: DecodingError.self) {
            try decoder.decode(StreamMessage.self, from: Data(#"{"event":{"seq":1},"control":{"exit":{}}}"#.utf8))
        }
    }
}
