import Foundation

/// How often an app asks to be woken for a background fetch — a minimum, never a promise.
///
/// The iOS shapes: `UIApplicationBackgroundFetchIntervalNever` (the default: never woken),
/// `UIApplicationBackgroundFetchIntervalMinimum` (as often as the system allows), or a duration.
public enum FetchInterval: Hashable, Sendable, CustomStringConvertible {
    case never
    case minimum
    case every(Duration)

    /// The smallest explicit interval accepted (1 second) and the largest (30 days).
    public static let acceptedRange: ClosedRange<Duration> = .seconds(1) ... .seconds(30 * 24 * 3600)

    /// Parses `never`, `minimum`, or a duration such as `900`, `900s`, `15m`, `2h`, `1d`.
    public init?(parsing text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces).lowercased()
        switch trimmed {
        case "never": self = .never
        case "minimum", "min": self = .minimum
        default:
            guard let duration = Duration(parsingHuman: trimmed), Self.acceptedRange.contains(duration) else {
                return nil
            }
            self = .every(duration)
        }
    }

    public var description: String {
        switch self {
        case .never: "never"
        case .minimum: "minimum"
        case .every(let duration): duration.humanDescription
        }
    }

    public static let requirement =
        "an interval is 'never', 'minimum', or a duration from 1s to 30d such as 900s, 15m, 2h"
}

extension FetchInterval: Codable {
    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let seconds = try? container.decode(Double.self) {
            guard seconds.isFinite, seconds >= 0, seconds <= 1e9 else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: Self.requirement)
            }
            let duration = Duration.milliseconds(Int64((seconds * 1000).rounded()))
            guard Self.acceptedRange.contains(duration) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: Self.requirement)
            }
            self = .every(duration)
            return
        }
        guard let interval = FetchInterval(parsing: try container.decode(String.self)) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: Self.requirement)
        }
        self = interval
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .never: try container.encode("never")
        case .minimum: try container.encode("minimum")
        case .every(let duration): try container.encode(duration.seconds)
        }
    }
}
