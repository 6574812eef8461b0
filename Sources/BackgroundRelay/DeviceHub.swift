import Foundation
import Synchronization

/// The devices connected to this relay node, each with a bell its uplink session waits on: a
/// committed push rings its device's bell, and the session sends what is pending.
///
/// A device that connects again (its old connection not yet seen to be gone) takes over: the
/// old session's bell stream ends, and with it that session.
final class DeviceHub: Sendable {
    private struct Session {
        var id: Int
        var bell: AsyncStream<Void>.Continuation
    }
    private struct State {
        var sessions: [String: Session] = [:]
        var nextID = 0
    }
    private let state = Mutex(State())

    /// Registers a session for `device`: its id and the bell it waits on (rung once at start).
    func connect(_ device: String) -> (id: Int, bell: AsyncStream<Void>) {
        let (bell, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        continuation.yield()
        let previous = state.withLock { state -> Session? in
            state.nextID += 1
            defer { state.sessions[device] = Session(id: state.nextID, bell: continuation) }
            return state.sessions[device]
        }
        previous?.bell.finish()
        return (state.withLock { $0.nextID }, bell)
    }

    /// The session ended; forgets it unless a newer one took over.
    func disconnect(_ device: String, session id: Int) {
        let ended = state.withLock { state -> Session? in
            guard let session = state.sessions[device], session.id == id else { return nil }
            state.sessions[device] = nil
            return session
        }
        ended?.bell.finish()
    }

    func ring(_ devices: some Sequence<String>) {
        let bells = state.withLock { state in devices.compactMap { state.sessions[$0]?.bell } }
        for bell in bells { bell.yield() }
    }

    /// Rings every session (after a gap in what this node heard).
    func ringAll() {
        let bells = state.withLock { $0.sessions.values.map(\.bell) }
        for bell in bells { bell.yield() }
    }

    func isConnected(_ device: String) -> Bool { state.withLock { $0.sessions[device] != nil } }

    var connectedCount: Int { state.withLock { $0.sessions.count } }

    /// Ends every session (the node is stopping).
    func disconnectAll() {
        let bells = state.withLock { state in
            defer { state.sessions = [:] }
            return state.sessions.values.map(\.bell)
        }
        for bell in bells { bell.finish() }
    }
}
