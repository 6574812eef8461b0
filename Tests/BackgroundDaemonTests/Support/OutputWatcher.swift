import Foundation
import Synchronization

/// Everything a child process writes to a pipe, kept, so that a test can wait for one line and
/// later for another (`DaemonProcess.readUntil` answers once and then drains the pipe away).
/// One thread reads; waiters are resumed as the text they wait for arrives — or with nil when
/// the pipe closes without it.
final class OutputWatcher: Sendable {
    private struct State {
        var text = ""
        var closed = false
        var waiters: [(id: UUID, marker: String, continuation: CheckedContinuation<Bool, Never>)] = []
    }
    private let state = Mutex(State())

    init(_ handle: FileHandle) {
        Thread { [self] in
            while true {
                let data = handle.availableData
                let resumed = state.withLock { state -> [CheckedContinuation<Bool, Never>] in
                    if data.isEmpty {
                        state.closed = true
                        defer { state.waiters = [] }
                        return state.waiters.map(\.continuation)
                    }
                    state.text += String(decoding: data, as: UTF8.self)
                    let text = state.text
                    let ready = state.waiters.filter { text.contains($0.marker) }
                    state.waiters.removeAll { text.contains($0.marker) }
                    return ready.map(\.continuation)
                }
                let found = !data.isEmpty
                for continuation in resumed { continuation.resume(returning: found) }
                if data.isEmpty { return }
            }
        }.start()
    }

    /// Whether `marker` was written (now or later) before the pipe closed; false too when the
    /// test is cancelled (its time limit), so a missing line fails the test instead of hanging it.
    func wait(for marker: String) async -> Bool {
        let id = UUID()
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let answer: Bool? = state.withLock { state in
                    if state.text.contains(marker) { return true }
                    if state.closed || Task.isCancelled { return false }
                    state.waiters.append((id, marker, continuation))
                    return nil
                }
                if let answer { continuation.resume(returning: answer) }
            }
        } onCancel: {
            let cancelled = state.withLock { state -> CheckedContinuation<Bool, Never>? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index).continuation
            }
            cancelled?.resume(returning: false)
        }
    }

    var text: String { state.withLock { $0.text } }
}
