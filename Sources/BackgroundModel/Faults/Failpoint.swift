import Foundation
import Synchronization

/// Named places where a crash hurts most — between a commit and the answer that reports it,
/// between a rename and the commit that records it — at which the fault harness (`Chaos/`) can
/// make bgd kill itself with SIGKILL, exactly as `kill -9` would, to prove each is idempotent
/// on replay (reliability-matrix D2).
///
/// Armed only by the environment: `BGD_FAILPOINT=push.afterCommitBeforeAnswer:once` (several
/// separated by commas; `:once` fires the first time, `:N` the N-th time, `:always` every time).
/// Unset, a failpoint is one dictionary lookup of an empty dictionary.
public enum Failpoint: String, CaseIterable, Sendable {
    /// A push is committed to the queue; the provider has not had its 200.
    case pushAfterCommitBeforeAnswer = "push.afterCommitBeforeAnswer"
    /// A run and its event are committed; the app has not been told or launched.
    case runAfterStartCommit = "run.afterStartCommit"
    /// A run's app process is started; bgd has not recorded its pid.
    case runAfterLaunch = "run.afterLaunch"
    /// The app's answer to a run is committed; the app has not had the reply.
    case runAfterResultCommit = "run.afterResultCommit"
    /// An app's acknowledgement is committed; the app has not had the reply.
    case eventAfterAckCommit = "event.afterAckCommit"
    /// A download's bytes are synced to disk; the checkpoint that counts them is not committed.
    case transferAfterCheckpointSync = "transfer.afterCheckpointFsync"
    /// An app's new token hash is committed (registered or rotated); its token file is staged,
    /// not yet in place.
    case appAfterTokenCommit = "app.afterTokenCommit"
    /// An upload's copy is whole and synced under its temporary name; no transfer exists yet.
    case transferAfterUploadCopy = "transfer.afterUploadCopy"
    /// The server took an upload (2xx) and its checkpoint says so; the completion is not committed.
    case transferAfterUploadAccepted = "transfer.afterUploadAccepted"
    /// A finished download is renamed into place; its completion is not committed.
    case transferAfterRename = "transfer.afterRename"
    /// A transfer's completion and its events are committed; the app has not been told.
    case transferAfterCompletionCommit = "transfer.afterCompletionCommit"
    /// In the app (the library): a transfer's event is handed to its session and remembered as
    /// handled; its acknowledgement has not been sent (reliability-matrix D9).
    case eventAfterHandOver = "event.afterHandOver"

    /// Kills the process here if the environment armed this failpoint for this pass.
    public func hit() {
        guard Self.armed.withLock({ $0.fire(rawValue) }) else { return }
        FileHandle.standardError.write(Data("failpoint \(rawValue): killing the process (SIGKILL)\n".utf8))
        kill(getpid(), SIGKILL)
    }

    /// The failpoints the environment names, parsed once; unknown names are reported, not fatal.
    private static let armed = Mutex(Arming(environment: ProcessInfo.processInfo.environment["BGD_FAILPOINT"] ?? ""))

    struct Arming {
        /// Passes left before each failpoint fires (1: the next one), or nil for every pass.
        var countdown: [String: Int?] = [:]

        init(environment: String) {
            for item in environment.split(separator: ",") {
                let parts = item.split(separator: ":", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
                guard let name = parts.first, !name.isEmpty else { continue }
                guard Failpoint(rawValue: name) != nil else {
                    FileHandle.standardError.write(
                        Data(
                            "BGD_FAILPOINT: no failpoint '\(name)' (known: \(Failpoint.allCases.map(\.rawValue).joined(separator: ", ")))\n"
                                .utf8))
                    continue
                }
                switch parts.count > 1 ? parts[1] : "once" {
                case "always": countdown[name] = .some(nil)
                case "once": countdown[name] = 1
                case let count: countdown[name] = Int(count).map { max(1, $0) } ?? 1
                }
            }
        }

        mutating func fire(_ name: String) -> Bool {
            guard let left = countdown[name] else { return false }
            guard let remaining = left else { return true }
            if remaining <= 1 {
                countdown[name] = nil
                return true
            }
            countdown[name] = remaining - 1
            return false
        }
    }
}
