import Foundation

/// A `Duration` as the wire carries it: seconds, a number (docs/api.md). Swift's own coding of a
/// `Duration` is its two 64-bit words (`[195, 2884905626637434880]`), which no client should have
/// to know; a bgd before this wrote that into its outbox, so it is still read.
struct WireSeconds: Codable, Hashable, Sendable {
    var duration: Duration

    init(_ duration: Duration) { self.duration = duration }

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let seconds = try? container.decode(Double.self) {
            guard seconds.isFinite, abs(seconds) < 1e15 else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "not a duration in seconds")
            }
            duration = .seconds(seconds)
        } else {
            duration = try container.decode(Duration.self)
        }
    }

    func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(duration.seconds)
    }
}
