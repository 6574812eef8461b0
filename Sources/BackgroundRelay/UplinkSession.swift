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

    enum Event: Sendable {
        case frame(UplinkFrame)
        case malformed(String)
        /// An empty line: a device checking that the connection is alive; echoed.
        case keepAlive
        /// The device closed its side.
        case ended
        /// Another uplink of the device took over, or the node stops.
        case takenAway
    }

    /// The code of a refusal or a closing when the store failed (not the device's fault).
    static let unavailable = "unavailable"

    /// How long a device has to close its side once told the uplink ends.
    static let closingGrace = 10.0

    /// The session over an HTTP/2 stream: a task reads the device's lines into the inbox.
    func run(reading body: RequestBody, writer: inout any ResponseBodyWriter) async throws {
        let inbox = SessionInbox()
        let reader = Task {
            do {
                var lines = UplinkLines()
                for try await buffer in body {
                    for line in try lines.append(buffer.readableBytesView) { inbox.post(line: line) }
                }
            } catch {
                inbox.post(.malformed("a line longer than \(UplinkFrame.maximumLine) bytes"))
            }
            inbox.post(.ended)
        }
        defer { reader.cancel() }
        try await serve(inbox: inbox, writer: &writer)
    }

    /// The session itself, `inbox` fed with the device's lines by whoever reads them (the
    /// HTTP/2 stream's reader task, or the line uplink's channel handler), until it ends.
    func serve(inbox: SessionInbox, writer: inout any ResponseBodyWriter) async throws {
        let session = hub.connect(device, inbox: inbox)
        defer { hub.disconnect(device, session: session) }
        let fencing = try await bounded { [device, node, clock] in
            try await $0.claim(device: device, node: node, now: clock.now)
        }
        metrics.connected(device)
        defer { metrics.disconnected(device) }
        try await writer.write(line(.ready(device: device)))
        /// Sent on this connection and not yet acknowledged.
        var unacknowledged: Set<Int64> = []
        /// Rung while `unacknowledged` was full: read once acknowledgements make room.
        var owed = false
        var closing = false
        // Under load what arrived while the last round ran is taken together: every
        // acknowledgement in one transaction, and one read of what is pending however many
        // pushes rang.
        for await _ in inbox.signal {
            let (acks, events, rung) = inbox.take()
            inbox.drained()
            var refusals: [(code: String, reason: String)] = []
            if !acks.isEmpty, let refusal = await acknowledge(acks, fencing: fencing) { refusals.append(refusal) }
            unacknowledged.subtract(acks)
            for event in events {
                switch event {
                case .ended:
                    try await writer.finish(nil)
                    return
                case .takenAway where !closing:
                    closing = true
                    let code = hub.isConnected(device) ? "superseded" : "stopping"
                    try await close(code: code, writer: &writer, inbox: inbox)
                case .takenAway:
                    break
                case .frame(let frame):
                    if let refusal = await handle(frame, fencing: fencing) { refusals.append(refusal) }
                case .keepAlive:
                    try await writer.write(ByteBuffer(string: "\n"))
                case .malformed(let text):
                    try await writer.write(line(.refused(code: "badFrame", reason: "not an uplink frame: \(text)")))
                }
            }
            for refusal in refusals where !closing {
                if refusal.code == Self.unavailable {
                    // What the store could not take (a registration, an acknowledgement) is
                    // not lost on the device: it connects again and sends it all again, and is
                    // sent every push still pending.
                    closing = true
                    try await close(code: Self.unavailable, writer: &writer, inbox: inbox)
                } else {
                    try await writer.write(line(.refused(code: refusal.code, reason: refusal.reason)))
                }
            }
            owed = owed || rung
            guard owed, !closing, unacknowledged.count < unacknowledgedLimit else { continue }
            owed = false
            let pushes: [RelayedPush]
            do {
                pushes = try await bounded { [device, unacknowledged, clock] in
                    try await $0.pendingPushes(of: device, excluding: unacknowledged, fencing: fencing, now: clock.now)
                }
            } catch RelayRefusal.superseded {
                closing = true  // the device is connected elsewhere now
                try await close(code: "superseded", writer: &writer, inbox: inbox)
                continue
            } catch {
                logger.error("Reading pending pushes failed", metadata: ["device": "\(device)", "error": "\(error)"])
                closing = true
                try await close(code: Self.unavailable, writer: &writer, inbox: inbox)
                continue
            }
            // Up to the cap; what is left stays pending, read again once acknowledgements come.
            let sending = pushes.prefix(unacknowledgedLimit - unacknowledged.count)
            var batch = ByteBuffer()
            for push in sending {
                batch.writeImmutableBuffer(line(.push(push)))
                unacknowledged.insert(push.seq)
            }
            if !sending.isEmpty { try await writer.write(batch) }
            if pushes.count == pendingBatch || sending.count < pushes.count { inbox.ring() }  // more wait
        }
    }

    /// Tells the device the uplink ends, and gives it `closingGrace` to close its side (the
    /// response ends then, or when it has).
    private func close(code: String, writer: inout any ResponseBodyWriter, inbox: SessionInbox) async throws {
        let reason =
            switch code {
            case "superseded": "the device has a newer uplink"
            case Self.unavailable: "this relay node cannot reach its database; connect again"
            default: "this relay node is stopping; connect again"
            }
        try await writer.write(line(.closing(code: code, reason: reason)))
        let clock = self.clock
        Task {
            try? await clock.sleep(until: clock.now.addingTimeInterval(Self.closingGrace))
            inbox.post(.ended)
        }
    }

    /// Marks pushes delivered; what was refused, if it was.
    private func acknowledge(_ seqs: [Int64], fencing: Int64) async -> (code: String, reason: String)? {
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
    private func handle(_ frame: UplinkFrame, fencing: Int64) async -> (code: String, reason: String)? {
        do {
            switch frame {
            case .register(let token, let topic):
                try await bounded { [device, clock] in
                    try await $0.register(token: token, topic: topic, device: device, now: clock.now)
                }
            case .revoke(let token, let milliseconds):
                try await bounded { [device] in
                    try await $0.revoke(
                        token: token, device: device, at: Date(timeIntervalSince1970: Double(milliseconds) / 1000))
                }
            case .ack(let seq):
                return await acknowledge([seq], fencing: fencing)
            case .ready, .push, .refused, .closing:
                return ("badFrame", "a device sends register, revoke and ack frames only")
            }
            return nil
        } catch let refusal as RelayRefusal {
            return (refusal.code, refusal.description)
        } catch {
            logger.error("Uplink frame failed", metadata: ["device": "\(device)", "error": "\(error)"])
            return (Self.unavailable, "the relay could not store that; send it again")
        }
    }

    /// A store call, bounded as the provider side's are (`storeCallLimit`): one
    /// that never ends fails as any store failure does, and the session closes with
    /// `unavailable` — the device connects again — instead of hanging with it.
    private func bounded<T: Sendable>(_ call: @escaping @Sendable (any RelayStore) async throws -> T) async throws -> T {
        let store = self.store
        return try await clock.within(storeCallLimit) { try await call(store) }
    }

    private func line(_ frame: UplinkFrame) -> ByteBuffer {
        var buffer = ByteBuffer(bytes: frame.encoded())
        buffer.writeInteger(UInt8(ascii: "\n"))
        return buffer
    }
}

/// What an uplink session has to do, gathered while it was busy: the device's frames in order,
/// its acknowledgements, and whether it was rung — one signal however much arrived.
final class SessionInbox: Sendable {
    private struct State {
        var events: [UplinkSession.Event] = []
        var acks: [Int64] = []
        var rung = false
    }
    private let state = Mutex(State())
    let signal: AsyncStream<Void>
    private let wake: AsyncStream<Void>.Continuation

    init() { (signal, wake) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1)) }

    func post(_ event: UplinkSession.Event) {
        state.withLock { $0.events.append(event) }
        wake.yield()
    }

    /// One line the device sent, without its newline: an empty one is a keep-alive.
    func post(line: [UInt8]) {
        if line.isEmpty {
            post(.keepAlive)
        } else if let frame = UplinkFrame.decode(line) {
            if case .ack(let seq) = frame { acknowledge(seq) } else { post(.frame(frame)) }
        } else {
            post(.malformed(String(decoding: line.prefix(80), as: UTF8.self)))
        }
    }

    /// How many events and acknowledgements wait for the session (a reader with no
    /// backpressure of its own stops reading past a bound).
    var backlog: Int { state.withLock { $0.events.count + $0.acks.count } }

    /// Called by the session after each take: what waits on a drained inbox (a reader that
    /// stopped at its bound) goes on.
    func drained() { onDrained.withLock { $0 }?() }

    /// Set by a reader that stops reading while the backlog is high.
    let onDrained = Mutex<(@Sendable () -> Void)?>(nil)

    func acknowledge(_ seq: Int64) {
        state.withLock { $0.acks.append(seq) }
        wake.yield()
    }

    func ring() {
        state.withLock { $0.rung = true }
        wake.yield()
    }

    /// Everything gathered since the last take.
    func take() -> (acks: [Int64], events: [UplinkSession.Event], rung: Bool) {
        state.withLock { state in
            defer { state = State() }
            return (state.acks, state.events, state.rung)
        }
    }
}
