import BackgroundModel
import Foundation

/// A background push as the app receives it: the provider's JSON (`userInfo` on iOS).
public struct RemoteNotification: Sendable, Hashable {
    /// The payload exactly as the provider sent it.
    public let json: String
    /// The push's `apns-id`. A push whose run was cut short before the handler answered (the
    /// app or bgd died) is offered again, with the same id: the library drops one whose answer
    /// it recorded, and a handler whose work is not idempotent can drop the rest by this id.
    public let apnsID: String?

    public init(json: String, apnsID: String? = nil) {
        self.json = json
        self.apnsID = apnsID
    }

    /// `userInfo`: the payload as a dictionary (`["aps": ["content-available": 1], "content-id": 42]`).
    public var userInfo: [String: Any] {
        (try? JSONSerialization.jsonObject(with: Data(json.utf8))) as? [String: Any] ?? [:]
    }

    /// Decodes the payload into the app's own type.
    public func decode<T: Decodable>(_ type: T.Type) throws -> T {
        try JSONDecoder().decode(type, from: Data(json.utf8))
    }
}
