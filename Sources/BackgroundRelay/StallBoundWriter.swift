import BackgroundModel
import Hummingbird
import NIOCore

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
    /// Closes the connection (a line uplink's) or the stream (an HTTP/2 uplink's).
    let cut: @Sendable () -> Void

    mutating func write(_ buffer: ByteBuffer) async throws {
        let timer = armed()
        defer { timer.cancel() }
        try await base.write(buffer)
    }

    /// Bounded too: ending an HTTP/2 response waits on the stream's flow control as a write does.
    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        let timer = armed()
        defer { timer.cancel() }
        try await base.finish(trailingHeaders)
    }

    /// Cuts the connection after `limit` unless cancelled first (the write ended).
    private func armed() -> Task<Void, any Error> {
        Task { [clock, limit, cut] in
            try await clock.sleep(for: limit)
            cut()
        }
    }
}
