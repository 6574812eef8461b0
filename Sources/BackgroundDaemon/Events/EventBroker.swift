import BackgroundModel
import Foundation
import Synchronization

/// Knows which apps hold an event stream open and nudges those streams.
///
/// The durable events live in the store; the broker carries only the news that there are new
/// ones (the stream then reads them from the store) and the non-durable control messages.
///
/// Each stream's news waits in one ordered queue (`StreamNews`) that a stream which does not
/// read cannot grow without end: news of one kind folds into the entry already waiting — the
/// events nudge into one, a transfer's progress into its latest, an expiration per run, the
/// latest lifecycle — so nothing is dropped and the order holds (a download's last progress
/// before its `downloadFinished`). Before, a bounded buffer of signals dropped its oldest:
/// 1,024 progress messages pushed out the nudge of a fetch's event, and the app, connected,
/// never got it (its run expired, blamed on it).
///
/// Each open event is held by one stream at a time (`take`): the one it was sent on, until the
/// app acknowledges it, its run ends, or that stream closes — then the app's other streams read
/// again what they passed over. Before, every open event went to every stream of the app: a
/// process bgd launched for a fetch and the app as the user opened it meanwhile both ran the
/// fetch, a push given to the one reached the other as well, and a download was handed to both.
public final class EventBroker: Sendable {
    public struct Subscription: Sendable {
        public let id: UUID
        public let app: AppID
        public let owner: StreamOwner
        /// Rings when news waits (any number of rings waiting count as one).
        let wakes: AsyncStream<Void>
        let news: StreamNews

        /// Whether the stream belongs to a process bgd launched rather than to an app the user runs.
        public var isLaunched: Bool { owner.isLaunched }

        /// What the stream is to send, in order.
        public var deliveries: Deliveries { Deliveries(wakes: wakes, news: news) }
    }

    /// What a stream sends next.
    public enum Delivery: Hashable, Sendable {
        /// Read the app's open events from the store and send them.
        case openEvents
        case control(ControlMessage)
        /// Say something, so idle connections stay open and a dead peer is noticed.
        case keepAlive
    }

    public struct Deliveries: AsyncSequence, Sendable {
        let wakes: AsyncStream<Void>
        let news: StreamNews

        public func makeAsyncIterator() -> Iterator { Iterator(wakes: wakes.makeAsyncIterator(), news: news) }

        public struct Iterator: AsyncIteratorProtocol {
            var wakes: AsyncStream<Void>.Iterator
            let news: StreamNews
            var ready: [Delivery] = []

            public mutating func next() async -> Delivery? {
                while ready.isEmpty {
                    ready = news.take()
                    if ready.isEmpty, await wakes.next() == nil { return nil }
                }
                return ready.removeFirst()
            }
        }
    }

    private struct Stream {
        var owner: StreamOwner
        var continuation: AsyncStream<Void>.Continuation
        let news: StreamNews

        var isLaunched: Bool { owner.isLaunched }

        func post(_ delivery: Delivery) {
            news.post(delivery)
            continuation.yield()
        }

        /// Read the app's open events again from the first it passed over (one held elsewhere
        /// then may be its now).
        func rewind() {
            news.rewind()
            post(.openEvents)
        }
    }

    /// An app's open streams, and which of them holds each event sent.
    private struct AppStreams {
        var streams: [UUID: Stream] = [:]
        var held: [EventSequence: (stream: UUID, run: RunID?)] = [:]

        var runningAppConnected: Bool { streams.values.contains { !$0.isLaunched } }
    }

    /// Whether a stream sends an event it read (`take`).
    public enum Verdict: Equatable, Sendable {
        /// Send it: the stream holds it now.
        case send
        /// This stream sent it already (read again after a rewind).
        case sentAlready
        /// Another stream holds it, or it is not this stream's (yet): passed over.
        case passedOver
    }

    /// The most streams one app holds open at once. An app needs one (a launched process and the
    /// user's own, two); each holds a connection, a descriptor and what it has read for its app,
    /// and a stream its app does not read holds them until it does: an app opening streams
    /// without end exhausted bgd's descriptors and memory (300 unread streams, 1.9 GB). A
    /// stream whose process ended closes with it, so a client reconnecting is not refused.
    public static let maximumStreamsPerApp = 4
    private let streams = Mutex<[AppID: AppStreams]>([:])
    /// Who each run in flight was given to (`give`): its events go to that one alone.
    private let holders = Mutex<[RunID: StreamOwner]>([:])
    private let changes = Atomic<Int>(0)
    /// Moves whenever a stream opens or closes (the app listing's cache key).
    public var connectionGeneration: Int { changes.load(ordering: .acquiring) }

    /// Rung when a stream opens: the keep-alive sleeps only while some stream is open.
    let streamOpened = Doorbell()

    public init() {}

    /// Whether any app holds an event stream open.
    public var hasStreams: Bool { streams.withLock { !$0.isEmpty } }

    /// A new stream for `app`, or nil when it holds `maximumStreamsPerApp` open already.
    public func subscribe(_ app: AppID, owner: StreamOwner) -> Subscription? {
        let (wakes, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = UUID()
        let news = StreamNews()
        let taken = streams.withLock { streams -> Bool in
            guard (streams[app]?.streams.count ?? 0) < Self.maximumStreamsPerApp else { return false }
            streams[app, default: AppStreams()].streams[id] = Stream(
                owner: owner, continuation: continuation, news: news)
            return true
        }
        guard taken else { return nil }
        changes.add(1, ordering: .releasing)
        streamOpened.ring()
        return Subscription(id: id, app: app, owner: owner, wakes: wakes, news: news)
    }

    /// The stream closed: what it held is let go of, and the app's other streams read again what
    /// they passed over — its events, and (the app as the user runs it gone) transfer events a
    /// launched process may take now.
    public func unsubscribe(_ subscription: Subscription) {
        let (stream, others) = streams.withLock { streams -> (Stream?, [Stream]) in
            guard var app = streams[subscription.app],
                let removed = app.streams.removeValue(forKey: subscription.id)
            else { return (nil, []) }  // ended already (a shutdown, then its lease)
            app.held = app.held.filter { $0.value.stream != subscription.id }
            streams[subscription.app] = app.streams.isEmpty ? nil : app
            return (removed, Array(app.streams.values))
        }
        guard let stream else { return }
        stream.continuation.finish()
        for other in others { other.rewind() }
        changes.add(1, ordering: .releasing)
    }

    /// Which of `events` (read from the store in order) the stream sends, taking hold of those it
    /// sends: none held by another stream, and only those its owner may take (`StreamOwner.mayTake`).
    public func take(_ events: [AppEvent], by subscription: Subscription) -> [Verdict] {
        let holders = self.holders.withLock { holders in events.map { event in event.run.flatMap { holders[$0] } } }
        return streams.withLock { streams in
            guard var app = streams[subscription.app], app.streams[subscription.id] != nil else {
                return events.map { _ in .passedOver }
            }
            let runningAppConnected = app.runningAppConnected
            let verdicts = zip(events, holders).map { event, holder -> Verdict in
                if let held = app.held[event.seq] { return held.stream == subscription.id ? .sentAlready : .passedOver }
                guard subscription.owner.mayTake(event, holder: holder, runningAppConnected: runningAppConnected)
                else { return .passedOver }
                app.held[event.seq] = (subscription.id, event.run)
                return .send
            }
            streams[subscription.app] = app
            return verdicts
        }
    }

    /// Run `run` of `app` is given to `owner`: its events go to that one's streams alone. Those
    /// that passed its event over before (a stream reads an event as soon as it is committed)
    /// read again.
    public func give(_ run: RunID, of app: AppID, to owner: StreamOwner) {
        holders.withLock { $0[run] = owner }
        for stream in streams(of: app) where stream.owner == owner { stream.rewind() }
    }

    /// The run has ended (its events are settled): nothing of it is held any more.
    public func runEnded(_ run: RunID) {
        holders.withLock { $0[run] = nil }
        streams.withLock { streams in
            for (app, var entry) in streams where entry.held.values.contains(where: { $0.run == run }) {
                entry.held = entry.held.filter { $0.value.run != run }
                streams[app] = entry
            }
        }
    }

    /// The app acknowledged events up to `seq` (or, `only`, that one): no stream holds them.
    public func acknowledged(upTo seq: EventSequence, only: Bool, by app: AppID) {
        streams.withLock { streams in
            guard var entry = streams[app] else { return }
            entry.held = entry.held.filter { only ? $0.key != seq : $0.key > seq }
            streams[app] = entry
        }
    }

    /// Whether the app holds any event stream open.
    public func isConnected(_ app: AppID) -> Bool { streams.withLock { $0[app] != nil } }

    /// Whether the app as the user runs it is connected, so a new run can go to it without a
    /// launch. A process bgd launched serves only the run it was launched for: once that run is
    /// over it is on its way out, even if its stream has not closed yet.
    public func isConnectedInForeground(_ app: AppID) -> Bool {
        streams.withLock { $0[app]?.runningAppConnected ?? false }
    }

    /// Tells the app's open streams that the store holds new events for it.
    public func eventsAvailable(for app: AppID) {
        for stream in streams(of: app) { stream.post(.openEvents) }
    }

    /// Sends a control message to the app's streams; `.exit` only to processes bgd launched.
    public func send(_ control: ControlMessage, to app: AppID) {
        for stream in streams(of: app) where stream.isLaunched || control != .exit { stream.post(.control(control)) }
    }

    /// Sends a control message about one process of the app's lifecycle to the streams of its
    /// kind: the app as the user runs it (`launched` false), or processes bgd launched. The
    /// other is told nothing of a time that is not its own.
    public func send(_ control: ControlMessage, to app: AppID, launched: Bool) {
        for stream in streams(of: app) where stream.isLaunched == launched { stream.post(.control(control)) }
    }

    /// Nudges every open stream to send a keep-alive line.
    public func keepAlive() {
        let all = streams.withLock { $0.values.flatMap { $0.streams.values } }
        for stream in all { stream.post(.keepAlive) }
    }

    /// Ends every stream of the app (it was unregistered).
    public func disconnect(_ app: AppID) {
        let removed = streams.withLock { $0.removeValue(forKey: app).map { Array($0.streams.values) } ?? [] }
        for stream in removed { stream.continuation.finish() }
    }

    private func streams(of app: AppID) -> [Stream] {
        streams.withLock { $0[app].map { Array($0.streams.values) } ?? [] }
    }
}

/// One stream's news, in the order it came, each kind folded into the entry already waiting
/// (see `EventBroker`): bounded by the kinds there are — one progress per transfer (an app has
/// at most 1,000), one expiration per run, one each of the rest, and an events nudge between
/// any two of them at most.
final class StreamNews: Sendable {
    private let queue = Mutex<[EventBroker.Delivery]>([])
    private let rewound = Atomic<Bool>(false)

    /// The next read of events starts again from the first the stream passed over.
    func rewind() { rewound.store(true, ordering: .releasing) }

    /// Whether a rewind was asked for since the last call (cleared).
    func takeRewind() -> Bool { rewound.exchange(false, ordering: .acquiringAndReleasing) }

    func post(_ delivery: EventBroker.Delivery) {
        queue.withLock { queue in
            let kind = Self.kind(of: delivery)
            if kind == .events {
                // Into a nudge only at the end: events nudged after a download's progress are
                // read after it (its `downloadFinished` after its last `didWriteData`).
                if queue.last != .openEvents { queue.append(delivery) }
            } else if case .progress = kind, let waiting = queue.firstIndex(where: { Self.kind(of: $0) == kind }) {
                queue[waiting] = delivery  // the latest progress, before what came after the first
            } else if let waiting = queue.firstIndex(where: { Self.kind(of: $0) == kind }) {
                // A state, a warning, an exit: the newest stands, after what came before it.
                queue.remove(at: waiting)
                // Two nudges side by side where it was are one (a nudge reads all there is).
                if waiting > 0, waiting < queue.count, queue[waiting - 1] == .openEvents, queue[waiting] == .openEvents
                {
                    queue.remove(at: waiting)
                }
                queue.append(delivery)
            } else {
                queue.append(delivery)
            }
        }
    }

    /// The news so far, cleared. Events are read from the store after this, so any committed
    /// before their nudge are in that read.
    func take() -> [EventBroker.Delivery] {
        queue.withLock { queue in
            defer { queue.removeAll() }
            return queue
        }
    }

    private enum Kind: Hashable {
        case events, keepAlive, exit, backgroundTimeExpiring, lifecycle
        case expire(RunID)
        case progress(TransferID)
    }

    private static func kind(of delivery: EventBroker.Delivery) -> Kind {
        switch delivery {
        case .openEvents: .events
        case .keepAlive: .keepAlive
        case .control(.exit): .exit
        case .control(.backgroundTimeExpiring): .backgroundTimeExpiring
        case .control(.lifecycle): .lifecycle
        case .control(.expire(let run, _)): .expire(run)
        case .control(.transferProgress(let transfer, _, _, _)): .progress(transfer)
        }
    }
}
