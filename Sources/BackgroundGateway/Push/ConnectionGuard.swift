import BackgroundModel
import HummingbirdCore
import Logging
import NIOCore
import NIOSSL
import NIOTLS
import Synchronization

/// What a listener reachable from the network allows one peer, and all peers together, so that
/// connections that never speak cannot hold bgd's memory and descriptors (probe S3).
public struct ConnectionLimits: Sendable {
    /// Open connections from one address; more are closed as they arrive.
    public var perPeer: Int
    /// Open connections in all; more are closed as they arrive.
    public var total: Int
    /// From accept until TLS is up (or, in plaintext, until the first bytes): a connection
    /// still silent then is closed.
    public var handshakeTimeout: Duration
    /// A connection with no stream open this long is closed (GOAWAY first, as HTTP/2 wants).
    public var idleTimeout: Duration
    /// At shutdown, how long open connections may take to finish before they are cut.
    public var shutdownGrace: Duration

    public init(
        perPeer: Int = 128, total: Int = 1024, handshakeTimeout: Duration = .seconds(10),
        idleTimeout: Duration = .seconds(300),
        shutdownGrace: Duration = .seconds(5)
    ) {
        self.perPeer = perPeer
        self.total = total
        self.handshakeTimeout = handshakeTimeout
        self.idleTimeout = idleTimeout
        self.shutdownGrace = shutdownGrace
    }
}

/// Counts the open connections by peer and closes the ones over `ConnectionLimits`, and keeps
/// every open one so a shutdown can cut those that outlive the grace period.
package final class ConnectionGate: Sendable {
    let limits: ConnectionLimits
    private struct State {
        var byPeer: [String: Int] = [:]
        var open: [ObjectIdentifier: any Channel] = [:]
        var refused = 0
        /// Waiting for the last connection to close (`drained`).
        var drainWaiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    init(limits: ConnectionLimits) { self.limits = limits }

    /// Takes the channel in, or says no (the caller closes it).
    func admit(_ channel: any Channel) -> Bool {
        let peer = channel.remoteAddress?.ipAddress ?? "unknown"
        let admitted = state.withLock { state -> Bool in
            guard state.open.count < limits.total, state.byPeer[peer, default: 0] < limits.perPeer else {
                state.refused += 1
                return false
            }
            state.byPeer[peer, default: 0] += 1
            state.open[ObjectIdentifier(channel)] = channel
            return true
        }
        if admitted {
            channel.closeFuture.whenComplete { _ in self.release(channel, peer: peer) }
        }
        return admitted
    }

    private func release(_ channel: any Channel, peer: String) {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.open[ObjectIdentifier(channel)] = nil
            let left = state.byPeer[peer, default: 1] - 1
            state.byPeer[peer] = left > 0 ? left : nil
            guard state.open.isEmpty else { return [] }
            defer { state.drainWaiters = [] }
            return state.drainWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// Returns once no connection is open (at once if none is).
    package func drained() async {
        await withCheckedContinuation { waiter in
            let empty = state.withLock { state -> Bool in
                if state.open.isEmpty { return true }
                state.drainWaiters.append(waiter)
                return false
            }
            if empty { waiter.resume() }
        }
    }

    package var openCount: Int { state.withLock { $0.open.count } }
    var refusedCount: Int { state.withLock { $0.refused } }

    /// Closes every connection still open (the end of a shutdown's grace period).
    package func closeAll() {
        for channel in state.withLock({ Array($0.open.values) }) { channel.close(mode: .all, promise: nil) }
    }
}

/// A child channel set up only if the gate admits it, and closed if it has not finished its
/// handshake (TLS, or the first bytes in plaintext) within the limit.
struct GuardedChannel<Base: ServerChildChannel>: ServerChildChannel {
    typealias Value = Base.Value
    let base: Base
    let gate: ConnectionGate
    /// Whether to close a connection that has not finished its handshake in time (HTTP/1 has
    /// no handshake and its own idle timeout).
    var watchesHandshake = true
    /// The connection's buffers, when not NIO's defaults (see `ConnectionBuffers`).
    var buffers: ConnectionBuffers?

    struct Refused: Error {}

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        guard gate.admit(channel) else {
            logger.debug(
                "Connection refused: over the limit", metadata: ["peer": "\(channel.remoteAddress?.description ?? "?")"]
            )
            // A failed setup alone leaves the socket open: close it.
            channel.close(mode: .all, promise: nil)
            return channel.eventLoop.makeFailedFuture(Refused())
        }
        if let buffers {
            // Before any handler: NIOSSL sizes its buffers from the channel's allocator when added.
            do {
                try channel.syncOptions?.setOption(ChannelOptions.allocator, value: buffers.allocator)
                try channel.syncOptions?.setOption(ChannelOptions.recvAllocator, value: buffers.receive)
            } catch {
                return channel.eventLoop.makeFailedFuture(error)
            }
        }
        guard watchesHandshake else { return base.setup(channel: channel, logger: logger) }
        let deadline = HandshakeDeadline(timeout: gate.limits.handshakeTimeout)
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(deadline, position: .first)
        }.flatMap {
            base.setup(channel: channel, logger: logger)
        }.flatMapThrowing { value in
            try channel.pipeline.syncOperations.addHandler(HandshakeDone(deadline: deadline))
            return value
        }
    }

    func handle(value: Value, logger: Logger) async { await base.handle(value: value, logger: logger) }
}

/// First in the pipeline: closes the socket itself (under TLS, which would otherwise wait for
/// a close_notify that never comes) unless `HandshakeDone` calls it off in time.
final class HandshakeDeadline: ChannelInboundHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = NIOAny
    private let timeout: Duration
    private var timer: Scheduled<Void>?
    private var context: ChannelHandlerContext?

    init(timeout: Duration) { self.timeout = timeout }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(
            in: .nanoseconds(
                Int64(timeout.components.seconds) * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)
        ) {
            loopBound.value.expire()
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        self.context = nil
    }

    private func expire() {
        context?.close(mode: .all, promise: nil)
    }

    /// The peer spoke in time: no deadline any more.
    func met() {
        timer?.cancel()
        timer = nil
    }
}

/// Last in the pipeline: TLS is up (its user event), or a first message got through the whole
/// pipeline (plaintext HTTP/2's preface and settings, HTTP/1's request head). Then it takes
/// itself and the deadline out of the pipeline: a connection that lives for months (a relay's
/// idle device) keeps neither, and no read passes through them again.
final class HandshakeDone: ChannelDuplexHandler, RemovableChannelHandler, @unchecked Sendable {
    typealias InboundIn = NIOAny
    typealias OutboundIn = NIOAny
    private let deadline: HandshakeDeadline
    private var done = false

    init(deadline: HandshakeDeadline) { self.deadline = deadline }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        context.fireUserInboundEventTriggered(event)
        if case TLSUserEvent.handshakeCompleted = event { met(context) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.fireChannelRead(data)
        met(context)
    }

    private func met(_ context: ChannelHandlerContext) {
        guard !done else { return }
        done = true
        deadline.met()
        let pipeline = context.pipeline.syncOperations
        pipeline.removeHandler(deadline, promise: nil)
        pipeline.removeHandler(context: context, promise: nil)
    }
}
