import Foundation

/// The stretch of past a timeline shows: the last hour, six hours, day or week (`?range=`).
public enum DashboardRange: String, CaseIterable, Sendable {
    case hour = "1h"
    case sixHours = "6h"
    case day
    case week

    /// The range a query asks for; anything else is the day.
    public init(query: String?) {
        self = query.flatMap(Self.init(rawValue:)) ?? .day
    }

    public var span: TimeInterval {
        switch self {
        case .hour: 3600
        case .sixHours: 6 * 3600
        case .day: 86400
        case .week: 7 * 86400
        }
    }

    /// How far ahead the timeline looks, for the wakes planned next: a quarter of the span.
    public var ahead: TimeInterval { span / 4 }

    public var label: String {
        switch self {
        case .hour: "last hour"
        case .sixHours: "last 6 hours"
        case .day: "last day"
        case .week: "last week"
        }
    }

    var short: String {
        switch self {
        case .hour: "1 h"
        case .sixHours: "6 h"
        case .day: "day"
        case .week: "week"
        }
    }

    /// The links to every range, the current one marked.
    static func navigation(path: String, current: DashboardRange) -> String {
        "<nav class=\"range\" aria-label=\"time range\">"
            + allCases.map { range in
                range == current
                    ? "<a href=\"\(path)?range=\(range.rawValue)\" aria-current=\"page\">\(range.short)</a>"
                    : "<a href=\"\(path)?range=\(range.rawValue)\">\(range.short)</a>"
            }.joined() + "</nav>"
    }
}
