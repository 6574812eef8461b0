import Foundation
import Synchronization

/// The apns-ids of the pushes this app's handler has answered, so that a push whose run was cut
/// short after the handler finished (bgd stopped before recording the answer) is not handled
/// twice when bgd offers it again in a new run. Sequence numbers cannot tell: the new run's
/// event has a new one.
///
/// Kept in the app's container (a later launch, or the app as the user runs it, remembers):
/// the one bgd gave a launched process, the one beside the token a user-started app read, or
/// the one bgd names when asked (`attach`); in memory until then. Only the newest `limit` are
/// kept: a push is offered again within minutes, not days.
final class HandledPushes: Sendable {
    private struct State {
        var file: String?
        var recent: [String]
    }
    private let state: Mutex<State>
    static let limit = 256

    init(containerPath: String?) {
        state = Mutex(State(file: nil, recent: []))
        if let containerPath { attach(containerPath: containerPath) }
    }

    /// Whether the list is kept in a container yet.
    var isKept: Bool { state.withLock { $0.file != nil } }

    /// Keeps the list in `containerPath` from now on, with the ids another process of the app
    /// saved there (a launched one that answered a push whose run bgd never closed).
    func attach(containerPath: String) {
        let file = containerPath + "/.background-handled-pushes"
        let saved = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        state.withLock { state in
            guard state.file == nil else { return }
            state.file = file
            let known = saved.split(separator: "\n").map(String.init)
            state.recent = Array((known.filter { !state.recent.contains($0) } + state.recent).suffix(Self.limit))
        }
    }

    func contains(_ apnsID: String) -> Bool { state.withLock { $0.recent.contains(apnsID) } }

    /// Remembers `apnsID` before the answer is sent (written to the container first, so a crash
    /// after the answer cannot forget it). Written under the lock: two handlers answering at
    /// once each wrote the list as it stood, and the older write could land last, losing the
    /// other's id from the file.
    func record(_ apnsID: String) {
        state.withLock { state in
            state.recent.append(apnsID)
            if state.recent.count > Self.limit { state.recent.removeFirst(state.recent.count - Self.limit) }
            guard let file = state.file else { return }
            let temporary = file + ".new"
            guard
                FileManager.default.createFile(
                    atPath: temporary, contents: Data((state.recent.joined(separator: "\n") + "\n").utf8))
            else { return }
            _ = rename(temporary, file)
        }
    }
}
