/// An identifier that is an integer: ordered, printed and encoded as the bare number (the
/// standard library's `RawRepresentable` coding).
public protocol IntegerIdentifier: RawRepresentable, Hashable, Comparable, Codable, Sendable, CustomStringConvertible
where RawValue == Int64 {
    init(rawValue: Int64)
}

extension IntegerIdentifier {
    public init(_ rawValue: Int64) { self.init(rawValue: rawValue) }
    public var description: String { String(rawValue) }
    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// Identifies one background run of an app (a fetch today; pushes and tasks reuse it later).
public struct RunID: IntegerIdentifier {
    public let rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }
}

/// An event's place in its app's outbox. Sequence numbers start at 1 and never repeat for an app.
public struct EventSequence: IntegerIdentifier {
    public let rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }
}

/// A push bgd accepted, as its queue numbers it (`bgctl push list`, the activity feed).
public struct PushID: IntegerIdentifier {
    public let rawValue: Int64
    public init(rawValue: Int64) { self.rawValue = rawValue }
}
