import BackgroundDashboard
import BackgroundModel
import Foundation
import Testing

struct TimelineTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)

    @Test func oneMarkPerEventInRangeEachWithItsClassAndTooltip() {
        let marks = [
            Timeline.Mark(
                row: .wakes, at: now.addingTimeInterval(-600), classes: "run newData", title: "fetch: newData"),
            Timeline.Mark(
                row: .wakes, at: now.addingTimeInterval(-300), classes: "run expired", title: "fetch: expired"),
            Timeline.Mark(row: .opens, at: now.addingTimeInterval(-100), classes: "open", title: "opened"),
            Timeline.Mark(
                row: .transfers, at: now.addingTimeInterval(-900), until: now.addingTimeInterval(-60),
                classes: "transfer completed", title: "t"),
            Timeline.Mark(row: .wakes, at: now.addingTimeInterval(-90_000), classes: "run newData", title: "too old"),
        ]
        let svg = Timeline(from: now.addingTimeInterval(-86400), until: now, marks: marks).svg(label: "test")
        #expect(svg.components(separatedBy: #"class="mark run "#).count - 1 == 2)
        #expect(svg.contains(#"class="mark run expired""#) && svg.contains(#"class="mark open""#))
        #expect(svg.contains("<rect class=\"mark transfer completed\""))
        #expect(!svg.contains("too old"))
        #expect(svg.hasPrefix("<div class=\"timeline-scroll\"><svg") && svg.hasSuffix("</svg></div>"))
    }

    /// Whatever an app or a provider put in a name is text, never markup.
    @Test func hostileTextIsEscaped() {
        let mark = Timeline.Mark(
            row: .pushes, at: now, classes: "push \"><script>", title: "<script>alert(1)</script>&")
        let svg = Timeline(from: now.addingTimeInterval(-60), until: now.addingTimeInterval(60), marks: [mark]).svg(
            label: "x\"y")
        #expect(!svg.contains("<script>"))
        #expect(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;&amp;") && svg.contains("x&quot;y"))
        #expect(HTML.escape("a'b") == "a&#39;b")
    }

    /// Escaping goes by code point, as the browser parses: a prefix that joins the `<` after it
    /// into one grapheme (U+0600), or a combining mark after a quote, does not carry markup
    /// through. By `Character` both passed whole — a redirecting server put `<img onerror>` on the
    /// dashboard through a transfer's error.
    @Test func markupHiddenInAGraphemeIsEscaped() {
        let hostile = "x:\u{600}<img src=x onerror=alert(1)//\u{600}>\"\u{301} \u{600}&\u{600}'"
        let escaped = HTML.escape(hostile)
        #expect(!escaped.unicodeScalars.contains { "<>\"'".unicodeScalars.contains($0) }, "\(escaped.debugDescription)")
        #expect(escaped.contains("\u{600}&lt;img") && escaped.contains("&quot;\u{301}") && escaped.contains("\u{600}&amp;"))
    }

    @Test func usageTiers() {
        #expect(AppOverview.tier(opensPerDay: nil) == "never opened")
        #expect(AppOverview.tier(opensPerDay: 3) == "daily")
        #expect(AppOverview.tier(opensPerDay: 0.3) == "weekly")
        #expect(AppOverview.tier(opensPerDay: 0.05) == "rarely")
    }
}
