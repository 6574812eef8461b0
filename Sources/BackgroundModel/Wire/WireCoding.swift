import Foundation

/// The JSON conventions of the API: ISO 8601 dates with milliseconds, sorted keys.
public enum WireCoding {
    public static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(format(date))
        }
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }

    public static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = parse(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "expected an ISO 8601 date")
            }
            guard StorableDates.contains(date) else {
                throw DecodingError.dataCorruptedError(
                    in: container, debugDescription: "'\(text.prefix(40))' is not \(StorableDates.requirement)")
            }
            return date
        }
        return decoder
    }

    /// To the millisecond, and the same again for a date read back from it: `parse` gives the
    /// nearest `Double`, which for `.236` is `.23599…`, and Foundation's formatter cuts that to
    /// `.235` — each trip through a client that decodes and encodes again lost a millisecond.
    /// The milliseconds are counted here with a microsecond's slack for the binary fraction.
    public static func format(_ date: Date) -> String {
        let milliseconds = (date.timeIntervalSince1970 * 1000 + 0.001).rounded(.down)
        let seconds = (milliseconds / 1000).rounded(.down)
        let whole = formatSeconds(Date(timeIntervalSince1970: seconds))
        let fraction = Int(milliseconds - seconds * 1000)
        return whole.dropLast() + "." + String(repeating: "0", count: fraction < 10 ? 2 : fraction < 100 ? 1 : 0)
            + String(fraction) + "Z"
    }

    /// To the second, for the sentences of reasons ("held until 2026-01-05T09:20:00Z").
    public static func formatSeconds(_ date: Date) -> String {
        date.formatted(
            .iso8601.year().month().day().time(includingFractionalSeconds: false).timeZone(separator: .omitted))
    }

    /// `text` with each time written in it as `format` or `formatSeconds` writes them (the
    /// sentences of reasons) replaced by `told(date, written)`: how bgctl and the dashboard show
    /// those times to a person, while the record and `--json` keep them exact.
    public static func replacingTimes(in text: String, with told: (Date, String) -> String) -> String {
        text.replacing(timestamp) { match in
            let written = String(match.output)
            return parse(written).map { told($0, written) } ?? written
        }
    }

    nonisolated(unsafe) private static let timestamp =
        /\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:?\d{2})/

    public static func parse(_ text: String) -> Date? {
        if let date = try? Date(text, strategy: .iso8601.year().month().day().time(includingFractionalSeconds: true)) {
            return date
        }
        return try? Date(text, strategy: .iso8601)
    }
}
