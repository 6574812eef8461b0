import BackgroundModel
import Foundation

/// Human-readable output: aligned tables and relative times.
enum TextFormat {
    static func table(header: [String], rows: [[String]]) {
        let all = [header] + rows
        let widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        for row in all {
            print(
                row.enumerated().map { $1.padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
                    .joined(separator: "  ").trimmingCharacters(in: .whitespaces))
        }
    }

    /// "in 14m (12:05:00)", "3m ago (11:48:10)".
    static func when(_ date: Date, now: Date) -> String {
        let delta = date.duration(since: now)
        let relative =
            delta >= .zero ? "in \(delta.humanDescription)" : "\((Duration.zero - delta).humanDescription) ago"
        return
            "\(relative) (\(date.formatted(date: Calendar.current.isDate(date, inSameDayAs: now) ? .omitted : .numeric, time: .standard)))"
    }
}
