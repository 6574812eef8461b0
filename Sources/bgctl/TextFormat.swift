import BackgroundModel
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Human-readable output: aligned tables that fit the terminal, outcomes in colour on a
/// terminal, and one time format everywhere (local, ISO-like, as systemctl prints them).
enum TextFormat {
    /// `--full`: every column whole, however wide the table.
    nonisolated(unsafe) static var showEverything = false

    /// "1 push", "2 pushes": a count with its noun agreeing (`plural` when not just noun + "s").
    static func count(_ value: Int, _ noun: String, plural: String? = nil) -> String {
        "\(value) \(value == 1 ? noun : plural ?? noun + "s")"
    }

    static func table(header: [String], rows: [[String]]) {
        let all = [header] + rows
        var widths = header.indices.map { column in all.map { $0[column].count }.max() ?? 0 }
        if !showEverything, let limit = width() {
            // Narrow the widest columns first, down to 8, until the table fits.
            while widths.reduce(0, +) + 2 * (widths.count - 1) > limit,
                let widest = widths.indices.max(by: { widths[$0] < widths[$1] }), widths[widest] > 8
            {
                widths[widest] -= 1
            }
        }
        for (index, row) in all.enumerated() {
            let cells = row.enumerated().map { column, text in
                let fitted = text.count > widths[column] ? String(text.prefix(widths[column] - 1)) + "…" : text
                let padded = fitted.padding(toLength: widths[column], withPad: " ", startingAt: 0)
                return index == 0 ? padded : colour(padded, for: text)
            }
            print(cells.joined(separator: "  ").trimmingCharacters(in: .whitespaces))
        }
    }

    /// The width tables must fit: the terminal's, else `COLUMNS`; nil (no limit) when the
    /// output goes to a file or a pipe and `COLUMNS` is not set.
    static func width() -> Int? {
        var size = winsize()
        if isatty(STDOUT_FILENO) == 1, ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 {
            return Int(size.ws_col)
        }
        return ProcessInfo.processInfo.environment["COLUMNS"].flatMap(Int.init).flatMap { $0 > 0 ? $0 : nil }
    }

    /// Red for trouble, green for a good end — on a terminal, unless `NO_COLOR` is set.
    static func colour(_ cell: String, for text: String) -> String {
        guard useColour else { return cell }
        let word = text.split(separator: " ").first.map(String.init) ?? text
        if ["failed", "crashed", "expired", "launchFailed", "cancelled", "dropped"].contains(word) {
            return "\u{1B}[31m\(cell)\u{1B}[0m"
        }
        if ["newData", "noData", "completed", "eventsHandled", "delivered"].contains(word) {
            return "\u{1B}[32m\(cell)\u{1B}[0m"
        }
        return cell
    }

    static let useColour =
        isatty(STDOUT_FILENO) == 1 && (ProcessInfo.processInfo.environment["NO_COLOR"] ?? "").isEmpty

    /// "in 14m (2026-11-24 12:05:00 UTC)", "3m ago (2026-11-24 11:48:10 UTC)".
    static func when(_ date: Date, now: Date) -> String { "\(relative(date, now: now)) (\(timestamp(date)))" }

    /// "in 14m", "3m ago".
    private static func relative(_ date: Date, now: Date) -> String {
        let delta = date.duration(since: now)
        return delta >= .zero ? "in \(delta.humanDescription)" : "\((Duration.zero - delta).humanDescription) ago"
    }

    /// A reason bgd wrote, its times (ISO 8601 in UTC, exact for scripts and the record) told
    /// in local time and from `now`, as every time bgctl prints: "held until 12:45 CET (in
    /// 40m)", the date too when it is not today's.
    static func reason(_ detail: String, now: Date) -> String {
        WireCoding.replacingTimes(in: detail) { date, _ in
            let sameDay = Calendar.current.isDate(date, inSameDayAs: now)
            return "\((sameDay ? clock : dayAndClock).string(from: date)) (\(relative(date, now: now)))"
        }
    }

    private static let clock = formatter(with: "HH:mm zzz")
    private static let dayAndClock = formatter(with: "yyyy-MM-dd HH:mm zzz")

    /// Local time, ISO-like, with the zone: "2026-11-24 12:05:00 CET".
    static func timestamp(_ date: Date) -> String { formatter.string(from: date) }

    private static let formatter = formatter(with: "yyyy-MM-dd HH:mm:ss zzz")

    private static func formatter(with format: String) -> DateFormatter {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.dateFormat = format
        return formatter
    }
}
