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

    public init(from: Date, until: Date, marks: [Mark]) {
        self.from = from
        self.until = until
        self.marks = marks.filter { ($0.until ?? $0.at) >= from && $0.at <= until }
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
        let tick: TimeInterval = span > 3 * 86400 ? 86400 : span > 12 * 3600 ? 3 * 3600 : 3600
        var t = (from.timeIntervalSince1970 / tick).rounded(.up) * tick
        let formatter = DateFormatter()
        formatter.timeZone = TimeZone(secondsFromGMT: Int(utcOffset))
        formatter.dateFormat = tick >= 86400 ? "EEE d" : "HH:mm"
        while t <= until.timeIntervalSince1970 {
            let date = Date(timeIntervalSince1970: t)
            let px = x(date)
            svg +=
                ##"<line x1="\##(f(px))" y1="\##(f(top - 4))" x2="\##(f(px))" y2="\##(f(height - 20))" stroke="#eee"/>"##
            svg +=
                ##"<text x="\##(f(px))" y="\##(f(height - 6))" font-size="11" text-anchor="middle" fill="#888">\##(formatter.string(from: date))</text>"##
            t += tick
        }
        for (index, row) in Row.allCases.enumerated() {
            let y = top + rowHeight * Double(index) + rowHeight / 2
            svg += ##"<text x="4" y="\##(f(y + 4))" font-size="12" fill="#555">\##(row.title)</text>"##
            svg +=
                ##"<line x1="\##(f(left))" y1="\##(f(y))" x2="\##(f(width - right))" y2="\##(f(y))" stroke="#ddd"/>"##
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
        svg += "</svg>"
        return svg
    }

    private func f(_ value: Double) -> String { String(format: "%.1f", value) }
}
