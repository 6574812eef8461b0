import BackgroundModel
import Hummingbird
import NIOCore
import Synchronization

/// An uplink session's state between rounds, and one round: everything the inbox gathered since
/// the last — acknowledgements in one transaction, the device's frames in order, then one read
/// of what is pending (up to the cap of unacknowledged pushes) however many pushes rang.
///
/// Rounds never overlap: the HTTP/2 uplink runs them one after another in its task; the line
/// uplink (`schedule`) starts a short task when the inbox is told of something and none is
/// running, which runs rounds until nothing new came meanwhile. That is why the state needs no
/// lock of its own.
final class SessionRounds: @unchecked Sendable {
    enum Outcome { case goOn, ended }

    let session: UplinkSession
    let hubID: Int
    let inbox: SessionInbox
    var writer: any ResponseBodyWriter
    let fencing: Int64
    /// Sent on this connection and not yet acknowledged.
    private var unacknowledged: Set<Int64> = []
    /// Rung while `unacknowledged` was full: read once acknowledgements make room.
    private var owed = false
    private var closing = false
    private var finished = false

    /// Whether a task runs rounds, and whether the inbox was told of something since it began
    /// its last one.
    private struct Driver {
        var running = false
        var again = false

        /// Whether the caller is to start a task running rounds (none runs); otherwise the
        /// running one is told to run another.
        mutating func startRounds() -> Bool {
            if running {
                again = true
                return false
            }
            running = true
            return true
        }

        /// Whether the running task may stop after its round (nothing came meanwhile).
        mutating func stopRounds() -> Bool {
            if again {
                again = false
                return false
            }
            running = false
            return true
        }
    }
    private let driver = Mutex(Driver())

    init(session: UplinkSession, hubID: Int, inbox: SessionInbox, writer: any ResponseBodyWriter, fencing: Int64) {
        self.session = session
        self.hubID = hubID
        self.inbox = inbox
        self.writer = writer
        self.fencing = fencing
    }

    /// Runs rounds in a task of their own unless one is running (which then runs another);
    /// `ended` once the session has ended.
    func schedule(then ended: @escaping @Sendable () -> Void) {
        guard driver.withLock({ $0.startRounds() }) else { return }
        Task {
            while true {
                let outcome: Outcome
                do {
                    outcome = try await round()
                } catch {
                    session.logger.debug(
                        "Line uplink ended", metadata: ["device": "\(session.device)", "error": "\(error)"])
                    outcome = .ended
                }
                if outcome == .ended {
                    end()
                    ended()
                    return  // `running` stays set: no round after the end
                }
                if driver.withLock({ $0.stopRounds() }) { return }
            }
        }
    }

    /// The session is over: off the hub and the metrics, its inbox told nobody, and its claim on
    /// the device given up — on PostgreSQL, a claim no node gave up made the device count as
    /// connected for good, and a now-or-never push to it waited a minute instead of ending.
    func end() {
        guard !finished else { return }
        finished = true
        inbox.stopListening()
        session.hub.disconnect(session.device, session: hubID)
        session.metrics.disconnected(session.device)
        let (session, fencing) = (self.session, self.fencing)
        Task { _ = try? await session.bounded { try await $0.release(device: session.device, fencing: fencing) } }
    }

    /// One round: whatever the inbox gathered.
    func round() async throws -> Outcome {
        session.activity()
        let (acks, events, rung) = inbox.take()
        inbox.drained()
        var refusals: [(code: String, reason: String)] = []
        if !acks.isEmpty, let refusal = await session.acknowledge(acks, fencing: fencing) { refusals.append(refusal) }
        unacknowledged.subtract(acks)
        for event in events {
            switch event {
            case .ended:
                try await writer.finish(nil)
                return .ended
            case .takenAway where !closing:
                closing = true
                let code = session.hub.isConnected(session.device) ? "superseded" : "stopping"
                try await session.close(code: code, writer: &writer, inbox: inbox)
            case .takenAway,
                .silent where closing:
                break
            case .silent:
                // Said, in case the device is only slow, with the grace every closing gets: an
                // HTTP/2 response ended while its request still streams makes AsyncHTTPClient
                // (1.37, bgd's HTTP/2 uplink) trap.
                closing = true
                try await session.close(code: UplinkSession.silent, writer: &writer, inbox: inbox)
            case .frame(let frame):
                if let refusal = await session.handle(frame, fencing: fencing) { refusals.append(refusal) }
            case .keepAlive:
                try await writer.write(ByteBuffer(string: "\n"))
            case .malformed(let text):
                try await writer.write(session.line(.refused(code: "badFrame", reason: "not an uplink frame: \(text)")))
            }
        }
        for refusal in refusals where !closing {
            if refusal.code == UplinkSession.unavailable {
                // What the store could not take (a registration, an acknowledgement) is not
                // lost on the device: it connects again and sends it all again, and is sent
                // every push still pending.
                closing = true
                try await session.close(code: UplinkSession.unavailable, writer: &writer, inbox: inbox)
            } else {
                try await writer.write(session.line(.refused(code: refusal.code, reason: refusal.reason)))
            }
        }
        owed = owed || rung
        guard owed, !closing, unacknowledged.count < unacknowledgedLimit else { return .goOn }
        owed = false
        let pushes: [RelayedPush]
        do {
            pushes = try await session.bounded {
                [device = session.device, unacknowledged, fencing, clock = session.clock] in
                try await $0.pendingPushes(of: device, excluding: unacknowledged, fencing: fencing, now: clock.now)
            }
        } catch RelayRefusal.superseded {
            closing = true  // the device is connected elsewhere now
            try await session.close(code: "superseded", writer: &writer, inbox: inbox)
            return .goOn
        } catch {
            session.logger.error(
                "Reading pending pushes failed", metadata: ["device": "\(session.device)", "error": "\(error)"])
            closing = true
            try await session.close(code: UplinkSession.unavailable, writer: &writer, inbox: inbox)
            return .goOn
        }
        // Up to the cap; what is left stays pending, read again once acknowledgements come.
        let sending = pushes.prefix(unacknowledgedLimit - unacknowledged.count)
        var batch = ByteBuffer()
        for push in sending {
            batch.writeImmutableBuffer(session.line(.push(push)))
            unacknowledged.insert(push.seq)
        }
        if !sending.isEmpty { try await writer.write(batch) }
        if pushes.count == pendingBatch || sending.count < pushes.count { inbox.ring() }  // more wait
        return .goOn
    }
}
