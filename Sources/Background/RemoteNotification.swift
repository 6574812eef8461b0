import BackgroundModel
import Foundation

/// A background push as the app receives it: the provider's JSON (`userInfo` on iOS).
public struct RemoteNotification: Sendable, Hashable {
    /// The payload exactly as the provider sent it.
    public let json: String

    public init(json: String) { self.json = json }

    /// `userInfo`: the payload as a dictionary (`["aps": ["content-available": 1], "content-id": 42]`).
    public var userInfo: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] ?? [:]
    }

    /// Decodes the payload into the app's own type.
    public func decode<T: Decodable>(_ type: T.Type) throws -> T { try JSONDecoder().decode(type, from: Data(json.utf8)) }
}
