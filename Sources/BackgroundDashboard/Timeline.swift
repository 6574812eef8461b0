import BackgroundModel
import Foundation

/// What happened to one app (or to all) over a stretch of time, drawn as SVG on the server:
/// one row per kind — opens, wakes (coloured by result), pushes, transfers, finite-length tasks
/// and lifecycle — plus the wakes the policy plans next. Each mark carries its class (`mark
/// run newData`, `mark open` …) and a tooltip.
public struct Timeline: Sendable {
    public enum Row: String, CaseIterable, Sendable {
        case opens, wakes, pushes, transfers, tasks

        var title: String {
            switch self {
            case .opens: "opens"
            case .wakes: "wakes"
            case .pushes: "pushes"
            case .transfers: "transfers"
            case .tasks: "tasks"
            }
        }
    }

    public struct Mark: Sendable {
        public var row: Row
        public var at: Date
        /// For spans (a transfer): when it ended (nil: a point).
        public var until: Date?
        /// CSS classes after `mark`, e.g. `run newData`.
        public var classes: String
        public var title: String

        public init(row: Row, at: Date, until: Date? = nil, classes: String, title: String) {
            self.row = row
            self.at = at
            self.until = until
            self.classes = classes
            self.title = title
        }
    }

    public var from: Date
    public var until: Date
    public var marks: [Mark]
    /// Where the "now" line goes (nil: none).
    public var now: Date?

    public init(from: Date, until: Date, marks: [Mark], now: Date? = nil) {
        self.from = from
        self.until = until
        self.now = now
        self.marks = marks.filter { ($0.until ?? $0.at) >= from && $0.at <= until }
    }

    /// What each colour and shape means: the key under every timeline.
    public static func legend() -> String {
        let entries: [(String, String)] = [
            ("open", "opened by the user"), ("run newData", "wake: new data"), ("run noData", "wake: no data"),
            ("run failed", "failed or crashed"), ("run expired", "expired"), ("run interrupted", "interrupted"),
            ("planned", "planned wake"), ("push", "push delivered"), ("push held", "push held or queued"),
            ("transfer", "transfer"), ("lifecycle", "lifecycle or task"),
        ]
        return "<ul class=\"legend\" aria-label=\"legend\">"
            + entries.map { classes, text in
                "<li><svg viewBox=\"0 0 12 12\" width=\"12\" height=\"12\" aria-hidden=\"true\"><circle class=\"mark \(classes)\" cx=\"6\" cy=\"6\" r=\"5\"/></svg>\(HTML.escape(text))</li>"
            }.joined() + "<li><span class=\"now-key\" aria-hidden=\"true\"></span>now</li></ul>"
    }

    /// The SVG, 1000 units wide, scaled to the page.
    public func svg(label: String, utcOffset: TimeInterval = 0) -> String {
        let width = 1000.0, left = 80.0, right = 10.0, rowHeight = 26.0, top = 18.0
        let height = top + rowHeight * Double(Row.allCases.count) + 22
        let span = max(1, until.timeIntervalSince(from))
        func x(_ date: Date) -> Double {
            left + (width - left - right) * min(1, max(0, date.timeIntervalSince(from) / span))
        }
        var svg =
            ##"<svg class="timeline" viewBox="0 0 \##(Int(width)) \##(Int(height))" role="img" aria-label="\##(HTML.escape(label))" xmlns="http://www.w3.org/2000/svg">"##
        // Hour or day ticks.
        let tick: TimeInterval =
            span > 3 * 86400 ? 86400 : span > 12 * 3600 ? 3 * 3600 : span > 3 * 3600 ? 3600 : 600
        var t = (from.timeIntervalSince1970 / tick).rounded(.up) * tick
        let formatter = DateFormatter()
        formatter.timeZone = TimeZone(secondsFromGMT: Int(utcOffset))
        formatter.dateFormat = tick >= 86400 ? "EEE d" : "HH:mm"
        while t <= until.timeIntervalSince1970 {
            let date = Date(timeIntervalSince1970: t)
            let px = x(date)
            svg +=
                ##"<line class="grid" x1="\##(f(px))" y1="\##(f(top - 4))" x2="\##(f(px))" y2="\##(f(height - 20))"/>"##
            svg +=
                ##"<text class="axis" x="\##(f(px))" y="\##(f(height - 6))" font-size="11" text-anchor="middle">\##(formatter.string(from: date))</text>"##
            t += tick
        }
        for (index, row) in Row.allCases.enumerated() {
            let y = top + rowHeight * Double(index) + rowHeight / 2
            svg += ##"<text class="row" x="4" y="\##(f(y + 4))" font-size="12">\##(row.title)</text>"##
            svg +=
                ##"<line class="lane" x1="\##(f(left))" y1="\##(f(y))" x2="\##(f(width - right))" y2="\##(f(y))"/>"##
            for mark in marks where mark.row == row {
                let title = "<title>\(HTML.escape(mark.title))</title>"
                let classes = HTML.escape("mark " + mark.classes)
                if let end = mark.until {
                    let x0 = x(mark.at), x1 = max(x(end), x0 + 3)
                    svg +=
                        ##"<rect class="\##(classes)" x="\##(f(x0))" y="\##(f(y - 5))" width="\##(f(x1 - x0))" height="10" rx="3">\##(title)</rect>"##
                } else if row == .opens {
                    svg +=
                        ##"<rect class="\##(classes)" x="\##(f(x(mark.at) - 3))" y="\##(f(y - 6))" width="6" height="12">\##(title)</rect>"##
                } else {
                    svg +=
                        ##"<circle class="\##(classes)" cx="\##(f(x(mark.at)))" cy="\##(f(y))" r="5">\##(title)</circle>"##
                }
            }
        }
        if let now, now >= from, now <= until {
            svg +=
                ##"<line class="now" x1="\##(f(x(now)))" y1="\##(f(top - 10))" x2="\##(f(x(now)))" y2="\##(f(height - 20))"><title>now</title></line>"##
            svg += ##"<text class="now" x="\##(f(x(now)))" y="\##(f(top - 10))" font-size="10" text-anchor="middle">now</text>"##
        }
        svg += "</svg>"
        return "<div class=\"timeline-scroll\">" + svg + "</div>"
    }

    private func f(_ value: Double) -> String { String(format: "%.1f", value) }
}
