import BackgroundModel
import Hummingbird
import NIOCore
import Synchronization

/// A session's writer whose every write must end within `limit`, or the connection is cut.
///
/// Each write is awaited: a device that stops reading holds its session up, not the relay's
/// memory. But a held-up session reads nothing more from its inbox — not the silence check's
/// `silent`, not a takeover, not the node stopping — so without a bound it never ended, and
/// its connection held a slot of the connection limits (128 a peer, 1,024 in all) for good.
/// A write still waiting after `limit` (the relay's `--uplink-silence`: a device that takes
/// nothing for as long as one that says nothing is gone) cuts the connection, which fails the
/// write, and the session ends.
struct StallBoundWriter: ResponseBodyWriter {
    var base: any ResponseBodyWriter
    let limit: Duration
    let clock: any WallClock
    /// Closes the connection under the session.
    let cut: @Sendable () -> Void

    mutating func write(_ buffer: ByteBuffer) async throws {
        let watch = StallWatch(limit: limit, clock: clock, cut: cut)
        defer { watch.writeEnded() }
        try await base.write(buffer)
    }

    /// Bounded too: ending an HTTP/2 response waits on the stream's flow control as a write does.
    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        let watch = StallWatch(limit: limit, clock: clock, cut: cut)
        defer { watch.writeEnded() }
        try await base.finish(trailingHeaders)
    }
}

/// One write's timer: cuts after `limit` unless the write ended first. Which came first is
/// decided under one lock, so a write that ends as the limit passes is not cut (nor counted).
final class StallWatch: Sendable {
    private struct State {
        var settled = false
        var timer: Task<Void, Never>?
    }
    private let state = Mutex(State())

    init(limit: Duration, clock: any WallClock, cut: @escaping @Sendable () -> Void) {
        let timer = Task { [self] in
            guard (try? await clock.sleep(for: limit)) != nil, settle() else { return }
            cut()
        }
        state.withLock { $0.timer = timer }
    }

    func writeEnded() {
        if settle() { state.withLock { $0.timer }?.cancel() }
    }

    /// Returns once the timer has cut or given up (what a test of the race waits for).
    func timerEnded() async { await state.withLock { $0.timer }?.value }

    /// Whether this call is the first to settle the race.
    private func settle() -> Bool {
        state.withLock { state in
            defer { state.settled = true }
            return !state.settled
        }
    }
}
