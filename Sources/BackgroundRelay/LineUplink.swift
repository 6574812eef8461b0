import BackgroundModel
import Foundation
import Hummingbird
import Logging
import NIOCore

/// The uplink as lines straight on TLS (ALPN `bgrelay-uplink/1`, on the uplink's port beside
/// HTTP/2): the device's first line is its credential, `Bearer <device>.<secret>` as the HTTP/2
/// uplink's Authorization header; then the same session, the same lines both ways. A refusal
/// that HTTP/2 answers with 401 comes as a `closing` line (`unauthorized`) before the relay
/// closes. An idle device costs the relay its TLS connection and one waiting session — no
/// HTTP/2 connection, stream or stream task.
struct LineUplink: Sendable {
    let store: any RelayStore
    let hub: DeviceHub
    let metrics: RelayMetrics
    let clock: any WallClock
    let logger: Logger
    let node: String
    /// How long a connection may take to send its credential line.
    let credentialWithin: Duration

    /// Puts the credential's reader in front of the session's.
    func prepare(_ channel: any Channel) throws {
        try channel.pipeline.syncOperations.addHandler(
            CredentialLine(eventLoop: channel.eventLoop, within: .seconds(credentialWithin.components.seconds)))
    }

    func serve(_ connection: NIOAsyncChannel<ByteBuffer, ByteBuffer>) async {
        do {
            let credential = try await connection.channel.pipeline.handler(type: CredentialLine.self).get().credential.get()
            try await connection.executeThenClose { inbound, outbound in
                var writer: any ResponseBodyWriter = LineWriter(outbound: outbound)
                guard let (device, secret) = UplinkServer.bearer(credential) else {
                    try await writer.write(
                        Self.closing("unauthorized", "send Bearer <device>.<secret> as the first line (bgctl push relay enroll)"))
                    return
                }
                let (store, clock) = (self.store, self.clock)
                guard try await clock.within(storeCallLimit, { try await store.authenticate(device: device, secret: secret) })
                else {
                    try await writer.write(Self.closing("unauthorized", "unknown device or wrong secret; enroll again"))
                    return
                }
                let session = UplinkSession(
                    device: device, node: node, store: store, hub: hub, metrics: metrics, clock: clock, logger: logger)
                try await session.run(reading: RequestBody(asyncSequence: inbound), writer: &writer)
            }
        } catch {
            logger.debug("Line uplink ended", metadata: ["error": "\(error)"])
            try? await connection.channel.close()
        }
    }

    static func closing(_ code: String, _ reason: String) -> ByteBuffer {
        var buffer = ByteBuffer(bytes: UplinkFrame.closing(code: code, reason: reason).encoded())
        buffer.writeInteger(UInt8(ascii: "\n"))
        return buffer
    }
}

/// First on a line uplink's pipeline: takes the connection's first line (the device's
/// credential) and hands on everything after it. A connection that sends no line within
/// `within`, or a first line longer than a credential, is closed.
final class CredentialLine: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    struct NoCredential: Error {}

    /// The first line, without its newline. (Immutable: read from any task.)
    let credential: EventLoopFuture<String>
    private let promise: EventLoopPromise<String>
    private let within: TimeAmount
    private var partial = ByteBuffer()
    private var taken = false
    private var timer: Scheduled<Void>?

    static let limit = 512

    init(eventLoop: any EventLoop, within: TimeAmount) {
        promise = eventLoop.makePromise()
        credential = promise.futureResult
        self.within = within
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: within) { [self] in
            guard !taken else { return }
            give(up: loopBound.value)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !taken else { return context.fireChannelRead(data) }
        var incoming = unwrapInboundIn(data)
        guard let newline = incoming.readableBytesView.firstIndex(of: UInt8(ascii: "\n")) else {
            partial.writeBuffer(&incoming)
            if partial.readableBytes > Self.limit { give(up: context) }
            return
        }
        var line = incoming.readSlice(length: newline - incoming.readerIndex)!
        incoming.moveReaderIndex(forwardBy: 1)
        partial.writeBuffer(&line)
        guard partial.readableBytes <= Self.limit else { return give(up: context) }
        taken = true
        timer?.cancel()
        promise.succeed(String(buffer: partial))
        partial = ByteBuffer()
        if incoming.readableBytes > 0 { context.fireChannelRead(wrapInboundOut(incoming)) }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !taken {
            taken = true
            timer?.cancel()
            promise.fail(NoCredential())
        }
        context.fireChannelInactive()
    }

    private func give(up context: ChannelHandlerContext) {
        taken = true
        promise.fail(NoCredential())
        context.close(promise: nil)
    }
}

/// The session's side of the connection: what it writes goes out as it is; finishing closes the
/// relay's side.
private struct LineWriter: ResponseBodyWriter {
    let outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>

    mutating func write(_ buffer: ByteBuffer) async throws { try await outbound.write(buffer) }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws { outbound.finish() }
}
