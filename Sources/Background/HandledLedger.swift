import BackgroundModel
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What this app has handled, kept so that what bgd offers again is not handled twice — by this
/// process, by a later launch, or by the app's other process (a launched one and the app as the
/// user runs it share the container):
/// - `pushes`, by apns-id: a push whose run was cut short after the handler finished (bgd
///   stopped before recording the answer) is offered again in a new run, with a new sequence
///   number;
/// - `transferEvents`, by sequence number and creation: a transfer's event handed to its session
///   whose acknowledgement never left (the process killed on its way) is sent again, to a new
///   process (reliability matrix D9).
///
/// Kept in the app's container: the one bgd gave a launched process, the one beside the token a
/// user-started app read, or the one bgd names when asked (`attach`); in memory until then. The
/// file is read again at each question, as the other process may have written since. Only the
/// newest `limit` are kept: what is offered again comes within minutes, not days.
final class HandledLedger: Sendable {
    private struct State {
        var file: String?
        var recent: [String]
    }
    private let name: String
    private let state: Mutex<State>
    static let limit = 256

    static func pushes(containerPath: String?) -> HandledLedger {
        HandledLedger(name: "pushes", containerPath: containerPath)
    }

    static func transferEvents(containerPath: String?) -> HandledLedger {
        HandledLedger(name: "events", containerPath: containerPath)
    }

    /// How a transfer's event is known across bgd's restarts (its sequence number alone would
    /// be given again to an app registered anew under the same id).
    static func key(of event: AppEvent) -> String {
        "\(event.seq.rawValue)@\(Int64((event.createdAt.timeIntervalSince1970 * 1000).rounded()))"
    }

    init(name: String, containerPath: String?) {
        self.name = name
        state = Mutex(State(file: nil, recent: []))
        if let containerPath { attach(containerPath: containerPath) }
    }

    /// Whether the list is kept in a container yet.
    var isKept: Bool { state.withLock { $0.file != nil } }

    /// Keeps the list in `containerPath` from now on, with what another process of the app saved
    /// there (a launched one that answered a push whose run bgd never closed); what this one
    /// handled before is written there too.
    func attach(containerPath: String) {
        let file = containerPath + "/.background-handled-" + name
        state.withLock { state in
            guard state.file == nil else { return }
            state.file = file
            let mine = state.recent
            // Written only when this process has something of its own to add (every launch
            // attaches at its start).
            state.recent =
                mine.isEmpty ? Self.saved(in: file) : Self.rewrite(file) { Self.appending(mine, to: $0) } ?? mine
        }
    }

    func contains(_ key: String) -> Bool {
        state.withLock { state in
            if state.recent.contains(key) { return true }
            guard let file = state.file, Self.saved(in: file).contains(key) else { return false }
            return true
        }
    }

    /// Remembers `key` before the answer or acknowledgement is sent (written to the container
    /// first, so a crash after it cannot forget it). The file is the list: `key` goes after what
    /// it holds now, read and written under an exclusive lock of the app's processes, so that
    /// neither of two processes writing at once loses the other's (before, the later rename
    /// dropped what the other had just written), and the oldest go first.
    func record(_ key: String) {
        state.withLock { state in
            let mine = Self.appending([key], to: state.recent)
            guard let file = state.file else {
                state.recent = mine
                return
            }
            state.recent = Self.rewrite(file) { saved in Self.appending([key], to: saved) } ?? mine
        }
    }

    /// `file`'s list made `change(list)`, under the lock every process of the app takes for it;
    /// the list written, or nil when it could not be.
    private static func rewrite(_ file: String, _ change: ([String]) -> [String]) -> [String]? {
        let lock = open(file + ".lock", O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lock >= 0 else { return nil }
        defer { close(lock) }
        while flock(lock, LOCK_EX) != 0 {
            guard errno == EINTR else { return nil }
        }
        let list = change(saved(in: file))
        let temporary = file + ".new.\(getpid())"
        guard
            FileManager.default.createFile(
                atPath: temporary, contents: Data((list.joined(separator: "\n") + "\n").utf8)),
            rename(temporary, file) == 0
        else { return nil }
        return list
    }

    /// `keys` after `list`, each once, the newest `limit`.
    private static func appending(_ keys: [String], to list: [String]) -> [String] {
        Array((list.filter { !keys.contains($0) } + keys).suffix(limit))
    }

    private static func saved(in file: String) -> [String] {
        ((try? String(contentsOfFile: file, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

}
