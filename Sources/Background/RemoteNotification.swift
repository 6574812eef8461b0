import BackgroundModel
import Foundation
import Synchronization

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

/// Bridges `application(_:didReceiveRemoteNotification:fetchCompletionHandler:)` to async; a
/// handler called twice counts once.
enum DelegateRemoteNotification {
    static func perform(
        _ delegate: any BackgroundApplicationDelegate, application: BackgroundApplication, notification: RemoteNotification
    ) async -> BackgroundFetchResult {
        await withCheckedContinuation { continuation in
            let called = Mutex(false)
            delegate.application(application, didReceiveRemoteNotification: notification) { result in
                let first = called.withLock { called in
                    defer { called = true }
                    return !called
                }
                if first { continuation.resume(returning: result) }
            }
        }
    }
}
