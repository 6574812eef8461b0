import BackgroundModel
import Foundation
import Synchronization

/// Knows which apps hold an event stream open and nudges those streams.
///
/// The durable events live in the store; the broker carries only the news that there are new
/// ones (the stream then reads them from the store) and the non-durable control messages.
///
/// A stream whose app does not read holds a bounded buffer of signals, and the oldest go first.
/// What must not be lost that way — that events wait, an `exit`, an `expire` — is kept beside
/// the buffer in `StreamNews` and taken at the stream's next signal, whichever it is: before,
/// 1,024 progress messages of a download pushed out the nudge of a fetch's event, and the app,
/// connected, never got it (its run expired, blamed on it).
public final class EventBroker: Sendable {
    public enum Signal: Hashable, Sendable {
        /// News waits in the subscription's `news`: events in the store, or a control message.
        case news
        /// A message that may be lost to a stream that does not read (a download's progress).
        case control(ControlMessage)
        /// Say something, so idle connections stay open and a dead peer is noticed.
        case keepAlive
    }

    public struct Subscription: Sendable {
        public let id: UUID
        public let app: AppID
        /// Whether the stream belongs to a process bgd launched (for one run) rather than to an
        /// app the user runs.
        public let isLaunched: Bool
        public let signals: AsyncStream<Signal>
        let news: StreamNews

        /// What the stream is to send, in order: at each signal, the news first (so a dropped
        /// signal's news goes with the next one), then the signal's own message.
        public var deliveries: Deliveries { Deliveries(signals: signals, news: news) }
    }

    /// What a stream sends next.
    public enum Delivery: Hashable, Sendable {
        /// Read the app's open events from the store and send them.
        case openEvents
        case control(ControlMessage)
        case keepAlive
    }

    public struct Deliveries: AsyncSequence, Sendable {
        let signals: AsyncStream<Signal>
        let news: StreamNews

        public func makeAsyncIterator() -> Iterator { Iterator(signals: signals.makeAsyncIterator(), news: news) }

        public struct Iterator: AsyncIteratorProtocol {
            var signals: AsyncStream<Signal>.Iterator
            let news: StreamNews
            var ready: [Delivery] = []

            public mutating func next() async -> Delivery? {
                while ready.isEmpty {
                    guard let signal = await signals.next() else { return nil }
                    let taken = news.take()
                    if taken.events { ready.append(.openEvents) }
                    ready += taken.controls.map(Delivery.control)
                    switch signal {
                    case .news: break
                    case .control(let message): ready.append(.control(message))
                    case .keepAlive: ready.append(.keepAlive)
                    }
                }
                return ready.removeFirst()
            }
        }
    }

    private struct Stream {
        var isLaunched: Bool
        var continuation: AsyncStream<Signal>.Continuation
        let news: StreamNews
    }

    /// The most streams one app holds open at once. An app needs one (a launched process and the
    /// user's own, two); each holds a connection, a descriptor and what it has read for its app,
    /// and a stream its app does not read holds them until it does: an app opening streams
    /// without end exhausted bgd's descriptors and memory (300 unread streams, 1.9 GB). A
    /// stream whose process ended closes with it, so a client reconnecting is not refused.
    public static let maximumStreamsPerApp = 4
    /// Signals waiting for a stream that does not read (nudges, keep-alives, control messages):
    /// beyond this the oldest are dropped — a stalled stream cannot grow without end.
    static let signalBuffer = 1024

    private let streams = Mutex<[AppID: [UUID: Stream]]>([:])
    private let changes = Atomic<Int>(0)
    /// Moves whenever a stream opens or closes (the app listing's cache key).
    public var connectionGeneration: Int { changes.load(ordering: .acquiring) }

    /// Rung when a stream opens: the keep-alive sleeps only while some stream is open.
    let streamOpened = Doorbell()

    public init() {}

    /// Whether any app holds an event stream open.
    public var hasStreams: Bool { streams.withLock { !$0.isEmpty } }

    /// A new stream for `app`, or nil when it holds `maximumStreamsPerApp` open already.
    public func subscribe(_ app: AppID, isLaunched: Bool) -> Subscription? {
        let (signals, continuation) = AsyncStream<Signal>.makeStream(
            bufferingPolicy: .bufferingNewest(Self.signalBuffer))
        let id = UUID()
        let news = StreamNews()
        let taken = streams.withLock { streams -> Bool in
            guard (streams[app]?.count ?? 0) < Self.maximumStreamsPerApp else { return false }
            streams[app, default: [:]][id] = Stream(isLaunched: isLaunched, continuation: continuation, news: news)
            return true
        }
        guard taken else { return nil }
        changes.add(1, ordering: .releasing)
        streamOpened.ring()
        return Subscription(id: id, app: app, isLaunched: isLaunched, signals: signals, news: news)
    }

    public func unsubscribe(_ subscription: Subscription) {
        let stream = streams.withLock { streams -> Stream? in
            let removed = streams[subscription.app]?.removeValue(forKey: subscription.id)
            if streams[subscription.app]?.isEmpty == true { streams[subscription.app] = nil }
            return removed
        }
        stream?.continuation.finish()
        changes.add(1, ordering: .releasing)
    }

    /// Whether the app holds any event stream open.
    public func isConnected(_ app: AppID) -> Bool { streams.withLock { $0[app] != nil } }

    /// Whether the app as the user runs it is connected, so a new run can go to it without a
    /// launch. A process bgd launched serves only the run it was launched for: once that run is
    /// over it is on its way out, even if its stream has not closed yet.
    public func isConnectedInForeground(_ app: AppID) -> Bool {
        streams.withLock { $0[app]?.values.contains { !$0.isLaunched } ?? false }
    }

    /// Tells the app's open streams that the store holds new events for it.
    public func eventsAvailable(for app: AppID) {
        for stream in streams(of: app) {
            stream.news.eventsWait()
            stream.continuation.yield(.news)
        }
    }

    /// Sends a control message to the app's streams; `.exit` only to processes bgd launched.
    /// A download's progress may be lost to a stream that does not read; the rest may not.
    public func send(_ control: ControlMessage, to app: AppID) {
        for stream in streams(of: app) where stream.isLaunched || control != .exit {
            if case .transferProgress = control {
                stream.continuation.yield(.control(control))
            } else {
                stream.news.add(control)
                stream.continuation.yield(.news)
            }
        }
    }

    /// Nudges every open stream to send a keep-alive line.
    public func keepAlive() {
        let continuations = streams.withLock { $0.values.flatMap { $0.values.map(\.continuation) } }
        for continuation in continuations { continuation.yield(.keepAlive) }
    }

    /// Ends every stream of the app (it was unregistered).
    public func disconnect(_ app: AppID) {
        let removed = streams.withLock { $0.removeValue(forKey: app).map { Array($0.values) } ?? [] }
        for stream in removed { stream.continuation.finish() }
    }

    private func streams(of app: AppID) -> [Stream] { streams.withLock { $0[app].map { Array($0.values) } ?? [] } }
}

/// What one stream must send and may not lose to its full signal buffer: that the store holds
/// events for it, and the control messages that are not progress, in order.
final class StreamNews: Sendable {
    /// Control messages kept for a stream that does not read: its app gets the latest this many
    /// (lifecycle changes, warnings) and no more, so a stalled stream's news stays bounded.
    static let controlLimit = 64
    private let state = Mutex<(events: Bool, controls: [ControlMessage])>((false, []))

    func eventsWait() { state.withLock { $0.events = true } }

    func add(_ control: ControlMessage) {
        state.withLock { state in
            state.controls.append(control)
            if state.controls.count > Self.controlLimit { state.controls.removeFirst() }
        }
    }

    /// The news so far, cleared: events are read from the store after this, so any committed
    /// before its nudge are in that read.
    func take() -> (events: Bool, controls: [ControlMessage]) {
        state.withLock { state in
            defer { state = (false, []) }
            return state
        }
    }
}
