import Foundation

/// An app's identity: a reverse-DNS name such as `com.example.newsfeed`.
///
/// Validated on construction and on decoding, so an `AppID` that exists is always well formed:
/// two or more labels of letters, digits and hyphens (no leading or trailing hyphen), at most
/// 63 characters a label and 255 in all. The first label starts with a letter.
public struct AppID: RawRepresentable, Hashable, Comparable, Codable, Sendable, CustomStringConvertible {
    public let rawValue: String

    public init?(rawValue: String) {
        guard Self.isValid(rawValue) else { return nil }
        self.rawValue = rawValue
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        let raw = try container.decode(String.self)
        guard let id = AppID(rawValue: raw) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: Self.requirement)
        }
        self = id
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(rawValue)
    }

    public var description: String { rawValue }

    public static func < (lhs: AppID, rhs: AppID) -> Bool { lhs.rawValue < rhs.rawValue }

    /// What a valid id looks like, for error messages.
    public static let requirement =
        "an app id is a reverse-DNS name such as com.example.newsfeed: two or more dot-separated labels of "
        + "letters, digits and hyphens, at most 255 characters"

    static func isValid(_ raw: String) -> Bool {
        guard raw.utf8.count <= 255 else { return false }
        let labels = raw.split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 2 else { return false }
        for (index, label) in labels.enumerated() {
            guard (1...63).contains(label.utf8.count) else { return false }
            guard label.utf8.allSatisfy({ isASCIIAlphanumeric($0) || $0 == UInt8(ascii: "-") }) else { return false }
            guard label.first != "-", label.last != "-" else { return false }
            if index == 0, let first = label.utf8.first, !isASCIILetter(first) { return false }
        }
        return true
    }

    private static func isASCIILetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
    }

    private static func isASCIIAlphanumeric(_ byte: UInt8) -> Bool {
        isASCIILetter(byte) || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
    }
}
