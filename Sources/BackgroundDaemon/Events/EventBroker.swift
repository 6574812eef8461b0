import BackgroundModel
import Foundation
import Synchronization

/// Knows which apps hold an event stream open and nudges those streams.
///
/// The durable events live in the store; the broker carries only the news that there are new
/// ones (the stream then reads them from the store) and the non-durable control messages.
public final class EventBroker: Sendable {
    public enum Signal: Hashable, Sendable {
        case eventsAvailable
        case control(ControlMessage)
    }

    public struct Subscription: Sendable {
        public let id: UUID
        public let app: AppID
        public let signals: AsyncStream<Signal>
    }

    private let streams = Mutex<[AppID: [UUID: AsyncStream<Signal>.Continuation]]>([:])

    public init() {}

    public func subscribe(_ app: AppID) -> Subscription {
        let (signals, continuation) = AsyncStream<Signal>.makeStream(bufferingPolicy: .unbounded)
        let id = UUID()
        streams.withLock { $0[app, default: [:]][id] = continuation }
        return Subscription(id: id, app: app, signals: signals)
    }

    public func unsubscribe(_ subscription: Subscription) {
        let continuation = streams.withLock { streams -> AsyncStream<Signal>.Continuation? in
            let removed = streams[subscription.app]?.removeValue(forKey: subscription.id)
            if streams[subscription.app]?.isEmpty == true { streams[subscription.app] = nil }
            return removed
        }
        continuation?.finish()
    }

    public func isConnected(_ app: AppID) -> Bool { streams.withLock { $0[app] != nil } }

    public var connectedApps: Set<AppID> { streams.withLock { Set($0.keys) } }

    /// Tells the app's open streams that the store holds new events for it.
    public func eventsAvailable(for app: AppID) { send(.eventsAvailable, to: app) }

    public func send(_ control: ControlMessage, to app: AppID) { send(.control(control), to: app) }

    /// Ends every stream of the app (it was unregistered).
    public func disconnect(_ app: AppID) {
        let continuations = streams.withLock { $0.removeValue(forKey: app).map { Array($0.values) } ?? [] }
        for continuation in continuations { continuation.finish() }
    }

    private func send(_ signal: Signal, to app: AppID) {
        let continuations = streams.withLock { $0[app].map { Array($0.values) } ?? [] }
        for continuation in continuations { continuation.yield(signal) }
    }
}
