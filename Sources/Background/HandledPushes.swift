import Foundation
import Synchronization

/// The apns-ids of the pushes this app's handler has answered, so that a push whose run was cut
/// short after the handler finished (bgd stopped before recording the answer) is not handled
/// twice when bgd offers it again in a new run. Sequence numbers cannot tell: the new run's
/// event has a new one.
///
/// Kept in the app's container when bgd gave it one (a later launch remembers), in memory
/// otherwise; only the newest `limit` are kept: a push is offered again within minutes, not days.
final class HandledPushes: Sendable {
    private let file: String?
    private let recent: Mutex<[String]>
    static let limit = 256

    init(containerPath: String?) {
        file = containerPath.map { $0 + "/.background-handled-pushes" }
        let saved = file.flatMap { try? String(contentsOfFile: $0, encoding: .utf8) } ?? ""
        recent = Mutex(saved.split(separator: "\n").map(String.init).suffix(Self.limit))
    }

    func contains(_ apnsID: String) -> Bool { recent.withLock { $0.contains(apnsID) } }

    /// Remembers `apnsID` before the answer is sent (written to the container first, so a crash
    /// after the answer cannot forget it). Written under the lock: two handlers answering at
    /// once each wrote the list as it stood, and the older write could land last, losing the
    /// other's id from the file.
    func record(_ apnsID: String) {
        recent.withLock { recent in
            recent.append(apnsID)
            if recent.count > Self.limit { recent.removeFirst(recent.count - Self.limit) }
            guard let file else { return }
            let temporary = file + ".new"
            guard
                FileManager.default.createFile(
                    atPath: temporary, contents: Data((recent.joined(separator: "\n") + "\n").utf8))
            else { return }
            _ = rename(temporary, file)
        }
    }
}
