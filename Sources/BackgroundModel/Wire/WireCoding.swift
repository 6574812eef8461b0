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

    public static func format(_ date: Date) -> String {
        date.formatted(
            .iso8601.year().month().day().time(includingFractionalSeconds: true).timeZone(separator: .omitted))
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
