import Foundation
import Synchronization

/// The devices connected to this relay node, each with the inbox of its uplink session: a
/// committed push rings the device's session, which sends what is pending.
///
/// A device that connects again (its old connection not yet seen to be gone) takes over: the
/// old session is told it was taken away, and ends.
final class DeviceHub: Sendable {
    private struct Session {
        var id: Int
        var inbox: SessionInbox
    }
    private struct State {
        var sessions: [String: Session] = [:]
        var nextID = 0
    }
    private let state = Mutex(State())

    /// Registers the session for `device` whose inbox is `inbox`, and rings it once; its id.
    func connect(_ device: String, inbox: SessionInbox) -> Int {
        let (id, previous) = state.withLock { state -> (Int, Session?) in
            state.nextID += 1
            defer { state.sessions[device] = Session(id: state.nextID, inbox: inbox) }
            return (state.nextID, state.sessions[device])
        }
        previous?.inbox.post(.takenAway)
        inbox.ring()
        return id
    }

    /// The session ended; forgets it unless a newer one took over.
    func disconnect(_ device: String, session id: Int) {
        state.withLock { state in
            if state.sessions[device]?.id == id { state.sessions[device] = nil }
        }
    }

    func ring(_ devices: some Sequence<String>) {
        let inboxes = state.withLock { state in devices.compactMap { state.sessions[$0]?.inbox } }
        for inbox in inboxes { inbox.ring() }
    }

    /// Rings every session (after a gap in what this node heard).
    func ringAll() {
        let inboxes = state.withLock { $0.sessions.values.map(\.inbox) }
        for inbox in inboxes { inbox.ring() }
    }

    func isConnected(_ device: String) -> Bool { state.withLock { $0.sessions[device] != nil } }

    var connectedCount: Int { state.withLock { $0.sessions.count } }
    var connectedDevices: [String] { state.withLock { Array($0.sessions.keys) } }

    /// One sweep of the silence check over every session (`SessionInbox.sweepQuiet`): the
    /// sessions found silent `limit` sweeps in a row are told so, and end. Their devices.
    func sweepSilent(limit: Int) -> [String] {
        let silent = state.withLock { state in
            state.sessions.filter { $0.value.inbox.sweepQuiet(limit: limit) }.map { ($0.key, $0.value.inbox) }
        }
        for (_, inbox) in silent { inbox.post(.silent) }
        return silent.map(\.0)
    }

    /// Ends every session (the node is stopping).
    func disconnectAll() {
        let inboxes = state.withLock { state in
            defer { state.sessions = [:] }
            return state.sessions.values.map(\.inbox)
        }
        for inbox in inboxes { inbox.post(.takenAway) }
    }
}
