import BackgroundModel
import Foundation
import Hummingbird
import Logging
import NIOCore
import Synchronization

/// One device's uplink on this node: sends what is pending for it, oldest first, whenever it is
/// rung (at start, and after each commit of a push for it); takes its registrations,
/// revocations and acknowledgements. A push stays pending until acknowledged, so whatever was
/// sent and not acknowledged when the connection ends is sent again on the next one — the
/// device drops a repeat by its apns-id.
///
/// Each read is of what is pending and was not sent on this connection — never "after the last
/// one sent": on PostgreSQL pushes committed by two nodes at once become visible out of the
/// order of their ids, and such a cursor passed over the one that came late, which then waited
/// for the device's next connection (the relay chaos test's push left pending).
struct UplinkSession: Sendable {
    let device: String
    /// This node's name, for the claim.
    let node: String
    let store: any RelayStore
    let hub: DeviceHub
    let metrics: RelayMetrics
    let clock: any WallClock
    let logger: Logger
    /// How long a write to the device may wait before the connection is cut (`StallBoundWriter`).
    let writeLimit: Duration
    /// Called at each round (`Relay.activity`).
    let activity: @Sendable () -> Void

    enum Event: Sendable {
        case frame(UplinkFrame)
        case malformed(String)
        /// An empty line: a device checking that the connection is alive; echoed.
        case keepAlive
        /// The device closed its side.
        case ended
        /// Another uplink of the device took over, or the node stops.
        case takenAway
        /// Nothing came from the device for the relay's silence limit (`UplinkSilence`).
        case silent
    }

    /// The code of a refusal or a closing when the store failed (not the device's fault).
    static let unavailable = "unavailable"
    /// The code of the closing of an uplink the device went silent on.
    static let silent = "silent"

    /// How long a device has to close its side once told the uplink ends.
    static let closingGrace = 10.0

    /// The session over an HTTP/2 stream: a task reads the device's lines into the inbox.
    /// `cut` closes the stream (`bounding`).
    func run(
        reading body: RequestBody, writer: any ResponseBodyWriter, cut: @escaping @Sendable () -> Void
    ) async throws {
        let inbox = SessionInbox()
        let reader = Task { await Self.read(body, into: inbox) }
        defer { reader.cancel() }
        var bounded: any ResponseBodyWriter = bounding(writer, cut: cut)
        try await serve(inbox: inbox, writer: &bounded)
    }

    /// `writer`, each of its writes bounded by `writeLimit`: past it `cut` closes the connection
    /// (or the stream), which fails the write, and the session ends.
    func bounding(_ writer: any ResponseBodyWriter, cut: @escaping @Sendable () -> Void) -> StallBoundWriter {
        StallBoundWriter(base: writer, limit: writeLimit, clock: clock) { [device, metrics, logger, writeLimit] in
            logger.info(
                "Cutting an uplink whose device reads nothing",
                metadata: ["device": "\(device)", "write.waited": "\(writeLimit)"])
            metrics.cutStalled()
            cut()
        }
    }

    /// Reads the device's lines into `inbox`, and no more while `SessionInbox.backlogLimit`
    /// wait there, until the session has taken them: HTTP/2's flow control then holds the device
    /// back. Before, a device that sent lines and never read the answers (the session's writes
    /// waiting) grew the relay's memory as fast as its link, as the line uplink's reader did not.
    static func read<Body: AsyncSequence & Sendable>(_ body: Body, into inbox: SessionInbox) async
    where Body.Element == ByteBuffer {
        let (drains, drained) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        inbox.onDrained { drained.yield() }
        var waits = drains.makeAsyncIterator()
        do {
            var lines = UplinkLines()
            for try await buffer in body {
                for line in try lines.append(buffer.readableBytesView) { inbox.post(line: line) }
                while inbox.backlog > SessionInbox.backlogLimit {
                    guard await waits.next() != nil else { return }  // the session ended
                }
            }
        } catch is CancellationError {
            return
        } catch is UplinkLines.TooLong {
            inbox.post(.malformed("a line longer than \(UplinkFrame.maximumLine) bytes"))
        } catch {
            // The stream broke (reset by the device, the connection lost): it ended, as a close
            // does — not "a line too long", which is what every error was said to be before.
        }
        inbox.post(.ended)
    }

    /// The session itself, `inbox` fed with the device's lines by whoever reads them (the
    /// HTTP/2 stream's reader task), in this task until it ends.
    func serve(inbox: SessionInbox, writer: inout any ResponseBodyWriter) async throws {
        let (signal, wake) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        inbox.listen { wake.yield() }
        guard let rounds = try await begin(inbox: inbox, writer: writer) else { return }
        defer { rounds.end() }
        for await _ in signal {
            if try await rounds.round() == .ended { return }
        }
    }

    /// The session with no task of its own while it waits (the line uplink's: an idle device
    /// then costs its connection and this session's state, not a suspended task's stack): each
    /// time the inbox is signalled, a short task runs rounds until nothing is left, and
    /// `ended` is called once the session has ended. `cut` closes the connection (`bounding`).
    func start(
        inbox: SessionInbox, writer: any ResponseBodyWriter, cut: @escaping @Sendable () -> Void,
        ended: @escaping @Sendable () -> Void
    ) async throws {
        guard let rounds = try await begin(inbox: inbox, writer: bounding(writer, cut: cut)) else { return ended() }
        inbox.listen { rounds.schedule(then: ended) }
    }

    /// Takes the device's connection on this node: registered with the hub (which rings the
    /// inbox once), the device claimed, `ready` sent. Nil when the connection ended before it
    /// got here — a device, or a stray copy of its credential, that authenticated and closed at
    /// once: it takes nothing, and the device's live session, if it has one, goes on. Before, it
    /// took the device over (the live session was told `superseded`, which bgd backs off from)
    /// and ended in its first round, leaving the device no session on the node until it
    /// connected again; a push sent `apns-expiration: 0` meanwhile was dropped. Lines sent along
    /// with the close are dropped with it (an ack there: its push goes again at the next uplink).
    /// The same holds for an HTTP/2 uplink whose request body ended first. (A close that arrives
    /// while the claim is being made still takes the device over.)
    private func begin(inbox: SessionInbox, writer: any ResponseBodyWriter) async throws -> SessionRounds? {
        guard !inbox.hasEnded else { return nil }
        let id = hub.connect(device, inbox: inbox)
        let fencing: Int64
        do {
            fencing = try await bounded { [device, node, clock] in
                try await $0.claim(device: device, node: node, now: clock.now)
            }
        } catch {
            hub.disconnect(device, session: id)
            throw error
        }
        metrics.connected(device)
        logger.info("Device connected", metadata: ["device": "\(device)"])
        let rounds = SessionRounds(session: self, hubID: id, inbox: inbox, writer: writer, fencing: fencing)
        do {
            try await rounds.writer.write(line(.ready(device: device)))
        } catch {
            rounds.end()
            throw error
        }
        return rounds
    }

    /// Tells the device the uplink ends, and gives it `closingGrace` to close its side (the
    /// response ends then, or when it has).
    func close(code: String, writer: inout any ResponseBodyWriter, inbox: SessionInbox) async throws {
        try await writer.write(line(.closing(code: code, reason: Self.reason(code))))
        let clock = self.clock
        Task {
            try? await clock.sleep(for: .seconds(Self.closingGrace))
            inbox.post(.ended)
        }
    }

    /// Why the relay ends an uplink, by its closing's code.
    static func reason(_ code: String) -> String {
        switch code {
        case "superseded": "the device has a newer uplink"
        case Self.silent: "nothing came from the device for too long, not even a keep-alive; connect again"
        case Self.unavailable: "this relay node cannot reach its database; connect again"
        default: "this relay node is stopping; connect again"
        }
    }

    /// Marks pushes delivered; what was refused, if it was.
    func acknowledge(_ seqs: [Int64], fencing: Int64) async -> (code: String, reason: String)? {
        do {
            let now = clock.now
            for acceptedAt in try await bounded({ [device] in
                try await $0.deliver(seqs, device: device, fencing: fencing, now: now)
            }) {
                metrics.delivered(latency: now.timeIntervalSince(acceptedAt))
            }
            return nil
        } catch let refusal as RelayRefusal {
            return (refusal.code, refusal.description)
        } catch {
            logger.error("Acknowledgements failed", metadata: ["device": "\(device)", "error": "\(error)"])
            return (Self.unavailable, "the relay could not store that; send it again")
        }
    }

    /// Carries out a frame from the device; what was refused, if it was.
    func handle(_ frame: UplinkFrame, fencing: Int64) async -> (code: String, reason: String)? {
        do {
            switch frame {
            case .register(let token, let topic):
                try await bounded { [device, clock] in
                    try await $0.register(token: token, topic: topic, device: device, now: clock.now)
                }
            case .revoke(let token, let milliseconds):
                // The device's own clock says when; never later than the relay's now (a revocation
                // in the future would refuse pushes until then), never before 1970.
                let said = Date(timeIntervalSince1970: Double(milliseconds) / 1000)
                guard milliseconds >= 0 else { return ("badFrame", "a revoke's 'at' is milliseconds since 1970") }
                try await bounded { [device, clock] in
                    try await $0.revoke(token: token, device: device, at: min(said, clock.now))
                }
            case .ack(let seq):
                return await acknowledge([seq], fencing: fencing)
            case .ready, .push, .refused, .closing:
                return ("badFrame", "a device sends register, revoke and ack frames only")
            }
            return nil
        } catch let refusal as RelayRefusal {
            // The operator sees what devices are refused (a token another device holds: a
            // device enrolled anew, or two sharing one credential).
            logger.notice(
                "Device's frame refused",
                metadata: ["device": "\(device)", "code": "\(refusal.code)", "reason": "\(refusal.description)"])
            return (refusal.code, refusal.description)
        } catch {
            logger.error("Uplink frame failed", metadata: ["device": "\(device)", "error": "\(error)"])
            return (Self.unavailable, "the relay could not store that; send it again")
        }
    }

    /// A store call, bounded as the provider side's are (`storeCallLimit`): one
    /// that never ends fails as any store failure does, and the session closes with
    /// `unavailable` — the device connects again — instead of hanging with it.
    func bounded<T: Sendable>(_ call: @escaping @Sendable (any RelayStore) async throws -> T) async throws -> T {
        let store = self.store
        return try await clock.within(storeCallLimit) { try await call(store) }
    }

    func line(_ frame: UplinkFrame) -> ByteBuffer {
        var buffer = ByteBuffer(bytes: frame.encoded())
        buffer.writeInteger(UInt8(ascii: "\n"))
        return buffer
    }
}

/// What an uplink session has to do, gathered while it was busy: the device's frames in order,
/// its acknowledgements, and whether it was rung — its listener told each time; the session
/// takes it all at once.
final class SessionInbox: Sendable {
    private struct State {
        var events: [UplinkSession.Event] = []
        var acks: [Int64] = []
        var rung = false
    }
    private let state = Mutex(State())
    /// Whether the device sent a line since the last sweep, how many sweeps in a row found it
    /// had not (`UplinkSilence`), and whether it was found silent; apart from `state`, which
    /// each take empties.
    private let liveness = Mutex((heard: true, quietSweeps: 0, found: false))
    /// Told whenever something arrives (set once by the session; anything that arrived before
    /// is told at once).
    private let listener = ListenerSlot()

    init() {}

    /// Calls `body` whenever something arrives, from now on and once now.
    func listen(_ body: @escaping @Sendable () -> Void) {
        listener.set(body)
        body()
    }

    /// Forgets the listener (the session ended: no more rounds, and no cycle through it).
    func stopListening() { listener.clear() }

    /// Whether a session listens (none before it starts or once it ended).
    var isListened: Bool { listener.isSet }

    private func wake() { listener.call() }

    func post(_ event: UplinkSession.Event) {
        state.withLock { $0.events.append(event) }
        wake()
    }

    /// Whether the device's side has ended and no session has taken that in yet.
    var hasEnded: Bool {
        state.withLock { state in
            state.events.contains {
                if case .ended = $0 { true } else { false }
            }
        }
    }

    /// One line the device sent, without its newline: an empty one is a keep-alive.
    func post(line: [UInt8]) {
        liveness.withLock { $0.heard = true }
        if line.isEmpty {
            post(.keepAlive)
        } else if let frame = UplinkFrame.decode(line) {
            if case .ack(let seq) = frame { acknowledge(seq) } else { post(.frame(frame)) }
        } else {
            post(.malformed(String(decoding: line.prefix(80), as: UTF8.self)))
        }
    }

    /// One sweep of the silence check: true, once in the session's life, when this is the
    /// `limit`th sweep in a row to find that the device sent nothing since the one before. Once:
    /// a session told so ends, and one held up by a device that reads nothing (which the relay
    /// then stops reading, so hears nothing) was counted and logged as silent at every few sweeps
    /// until its write was cut.
    func sweepQuiet(limit: Int) -> Bool {
        liveness.withLock { liveness in
            guard !liveness.found else { return false }
            if liveness.heard {
                (liveness.heard, liveness.quietSweeps) = (false, 0)
                return false
            }
            liveness.quietSweeps += 1
            liveness.found = liveness.quietSweeps == limit
            return liveness.found
        }
    }

    /// How many events and acknowledgements a reader lets wait before it stops reading.
    static let backlogLimit = 1_000

    /// How many events and acknowledgements wait for the session (a reader with no
    /// backpressure of its own stops reading past a bound).
    var backlog: Int { state.withLock { $0.events.count + $0.acks.count } }

    /// Called by the session after each take: what waits on a drained inbox (a reader that
    /// stopped at its bound) goes on.
    func drained() { drainedListener.call() }

    /// Set by a reader that stops reading while the backlog is high.
    func onDrained(_ body: @escaping @Sendable () -> Void) { drainedListener.set(body) }
    private let drainedListener = ListenerSlot()

    func acknowledge(_ seq: Int64) {
        state.withLock { $0.acks.append(seq) }
        wake()
    }

    func ring() {
        state.withLock { $0.rung = true }
        wake()
    }

    /// Everything gathered since the last take.
    func take() -> (acks: [Int64], events: [UplinkSession.Event], rung: Bool) {
        state.withLock { state in
            defer { state = State() }
            return (state.acks, state.events, state.rung)
        }
    }
}
