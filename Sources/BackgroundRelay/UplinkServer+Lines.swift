import BackgroundGateway
import BackgroundModel
import Foundation
import Hummingbird
import Logging
import NIOCore
import Synchronization

/// The uplink as lines straight on TLS (ALPN `bgrelay-uplink/1`, on the uplink's port beside
/// HTTP/2): the device's first line is its credential, `Bearer <device>.<secret>` as the HTTP/2
/// uplink's Authorization header; then the same session, the same lines both ways. A refusal
/// that HTTP/2 answers with 401 comes as a `closing` line (`unauthorized`) before the relay
/// closes. An idle device costs the relay its TLS connection and its session's state: no HTTP/2
/// connection or stream, and no task — a channel handler (`UplinkLineReader`) reads the lines
/// into the session's inbox, and a short task runs the session's rounds when something arrives
/// (`SessionRounds`).
extension UplinkServer {
    /// Puts the reader of the device's lines on the connection: its credential line is due
    /// within the handshake timeout.
    func prepareLines(_ channel: any Channel) throws {
        // In nanoseconds: a timeout under a second must not become none.
        let within = Int64(configuration.connections.handshakeTimeout.seconds * 1e9)
        // Under TLS (lines are offered only there): what the socket wrote gives its pages back.
        try channel.pipeline.syncOperations.addHandler(WrittenRecordPages(), position: .first)
        try channel.pipeline.syncOperations.addHandler(
            UplinkLineReader(eventLoop: channel.eventLoop, within: .nanoseconds(within)))
    }

    func serveLines(_ channel: any Channel) async {
        do {
            let reader = try await channel.pipeline.handler(type: UplinkLineReader.self).get()
            guard let credential = try await reader.takeCredential()?.get() else {
                throw UplinkLineReader.NoCredential()
            }
            var writer: any ResponseBodyWriter = ChannelWriter(channel: channel)
            if let (device, secret) = Self.bearer(credential) {
                let known: Bool
                do {
                    known = try await authenticate(device: device, secret: secret)
                } catch {
                    try await writer.write(
                        Self.closing(UplinkSession.unavailable, "this relay node cannot reach its database; connect again"))
                    throw error
                }
                if known {
                    // The session goes on without this task; the connection closes when it ends.
                    try await session(of: device).start(
                        inbox: reader.inbox, writer: writer, cut: { channel.cutBeneathTLS() }
                    ) { channel.close(promise: nil) }
                    return
                } else {
                    try await writer.write(Self.closing("unauthorized", "unknown device or wrong secret; enroll again"))
                }
            } else {
                try await writer.write(
                    Self.closing(
                        "unauthorized", "send Bearer <device>.<secret> as the first line (bgctl push relay enroll)"))
            }
        } catch {
            logger.debug("Line uplink ended", metadata: ["error": "\(error)"])
        }
        try? await channel.close()
    }

    static func closing(_ code: String, _ reason: String) -> ByteBuffer {
        var buffer = ByteBuffer(bytes: UplinkFrame.closing(code: code, reason: reason).encoded())
        buffer.writeInteger(UInt8(ascii: "\n"))
        return buffer
    }
}

/// Reads a line uplink: the connection's first line is the device's credential
/// (`takeCredential`); every line after it goes to the session's `inbox`. A connection that
/// sends no line within `within`, or a first line longer than a credential, is closed; a later
/// line longer than a frame may be ends the session. It stops reading while the session has a backlog
/// (`backlogLimit`), and goes on once the session has taken it.
final class UplinkLineReader: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer

    struct NoCredential: Error {}

    /// Read from any task, as `inbox` is.
    private let credential: Mutex<EventLoopFuture<String>?>
    let inbox = SessionInbox()
    /// Until the first line came (or never will): nothing keeps the credential once it is taken.
    private var promise: EventLoopPromise<String>?
    private let within: TimeAmount
    private var timer: Scheduled<Void>?
    private var lines = UplinkLines(limit: credentialLimit)
    private var taken = false
    private var ended = false

    static let credentialLimit = 512

    init(eventLoop: any EventLoop, within: TimeAmount) {
        let promise = eventLoop.makePromise(of: String.self)
        self.promise = promise
        credential = Mutex(promise.futureResult)
        self.within = within
    }

    /// The first line, without its newline — once: the reader keeps no copy of the device's
    /// secret for the life of its connection.
    func takeCredential() -> EventLoopFuture<String>? {
        credential.withLock { future in
            defer { future = nil }
            return future
        }
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: within) { [self] in
            guard !taken else { return }
            give(up: loopBound.value)
        }
        let channel = context.channel
        inbox.onDrained { channel.setOption(ChannelOptions.autoRead, value: true).whenComplete { _ in } }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !ended else { return }
        var buffer = unwrapInboundIn(data)
        // The lines are copied out of it, and NIOSSL emptied its own view of its plaintext
        // buffer before handing this read on: no one reads these bytes again, so an idle device
        // keeps no page of its 32 KB read buffer.
        defer { PageBackedBuffers.releasePages(of: buffer) }
        let read: [[UInt8]]
        do {
            if !taken {
                let view = buffer.readableBytesView
                guard let newline = view.firstIndex(of: UInt8(ascii: "\n")) else {
                    _ = try lines.append(view)
                    return
                }
                let first = try lines.append(view[...newline])
                taken = true
                timer?.cancel()
                timer = nil
                // Handed out once the event loop has taken in everything the socket had (its
                // tasks run after the read loop): a device that sent its credential and closed in
                // the same flush (NIOSSL passes the line on, then `inputClosed`, in one call) has
                // ended by then, and its session takes nothing over (`UplinkSession.begin`).
                let credential = String(decoding: first[0], as: UTF8.self)
                context.eventLoop.execute { [self] in settle(.success(credential)) }
                // The frames after it may be as long as the uplink allows.
                lines = UplinkLines()
                buffer.moveReaderIndex(to: newline + 1)
            }
            read = try lines.append(buffer.readableBytesView)
        } catch {
            guard taken else { return give(up: context) }
            inbox.post(.malformed("a line longer than \(UplinkFrame.maximumLine) bytes"))
            return end()
        }
        for line in read { inbox.post(line: line) }
        if inbox.backlog > SessionInbox.backlogLimit {
            context.channel.setOption(ChannelOptions.autoRead, value: false).whenComplete { _ in }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        deviceClosed()
        context.fireChannelInactive()
    }

    /// The device closed its side — TLS close_notify, or its socket — and the connection stays
    /// half open (the server allows remote half-closure): nothing more will come, so the
    /// session ends and closes it. Before, it lived on until the silence check found it, held
    /// its slot of `--max-devices`, and the device counted as connected.
    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if let event = event as? ChannelEvent, event == .inputClosed { deviceClosed() }
        context.fireUserInboundEventTriggered(event)
    }

    private func deviceClosed() {
        if !taken {
            taken = true
            timer?.cancel()
            settle(.failure(NoCredential()))
        }
        end()
    }

    private func end() {
        guard !ended else { return }
        ended = true
        inbox.post(.ended)
    }

    private func give(up context: ChannelHandlerContext) {
        taken = true
        ended = true
        settle(.failure(NoCredential()))
        context.close(promise: nil)
    }

    /// Answers `takeCredential`'s future, once, and lets the promise go.
    private func settle(_ result: Result<String, any Error>) {
        promise?.completeWith(result)
        promise = nil
    }
}

/// The session's side of the connection: what it writes goes out as it is, each write awaited
/// (a device that does not read holds the session up, not the relay's memory — for at most
/// `--uplink-silence`, `StallBoundWriter`); finishing closes the connection.
private struct ChannelWriter: ResponseBodyWriter {
    let channel: any Channel

    mutating func write(_ buffer: ByteBuffer) async throws { try await channel.writeAndFlush(buffer) }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws { try await channel.close() }
}
