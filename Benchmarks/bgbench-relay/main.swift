import AsyncHTTPClient
import BackgroundModel
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOPosix
import NIOSSL

// A light device simulator for bgrelay's benchmarks (Benchmarks/relay.sh), speaking the uplink:
//   bgbench-relay idle URL CA N        enroll N devices, hold N uplinks open (each its own TCP+TLS
//                                      connection, as N machines would), print "ready N", wait for stdin to close
//   bgbench-relay lines URL CA N       the same with the uplink as lines straight on TLS (ALPN
//                                      bgrelay-uplink/1), as bgd holds it; enrolled over one connection
//   bgbench-relay bare URL CA N        N connections that enrolled and sit idle, no uplink (the
//                                      connection's own cost, for comparison)
//   bgbench-relay device URL CA TOKEN  enroll one device, register TOKEN, print "ready", then
//                                      acknowledge every push until stdin closes; prints the count
//   bgbench-relay line-device URL CA TOKEN  the same on the line uplink (as bgd holds it)

let arguments = CommandLine.arguments
guard arguments.count >= 5, ["idle", "lines", "bare", "device", "line-device"].contains(arguments[1]) else {
    FileHandle.standardError.write(Data("usage: bgbench-relay idle|lines|bare URL CA N | device|line-device URL CA TOKEN\n".utf8))
    exit(64)
}
let (mode, url, ca) = (arguments[1], arguments[2], arguments[3])

func makeClient() -> HTTPClient {
    var tls = TLSConfiguration.makeClientConfiguration()
    tls.additionalTrustRoots = [.file(ca)]
    var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
    configuration.httpVersion = .automatic
    return HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
}

func enroll(_ client: HTTPClient) async throws -> RelayEnrollment {
    var request = HTTPClientRequest(url: url + "/v1/devices")
    request.method = .POST
    let response = try await client.execute(request, timeout: .seconds(30))
    let body = try await response.body.collect(upTo: 4096)
    guard response.status == .ok else {
        // A relay's enrollment limit, say: its answer says which (bgrelay --enrollment-rate).
        throw EnrollmentRefused(description: "the relay refused to enroll a device: \(response.status.code) \(String(buffer: body))")
    }
    return try JSONDecoder().decode(RelayEnrollment.self, from: Data(buffer: body))
}

struct EnrollmentRefused: Error, CustomStringConvertible { let description: String }

/// Opens an uplink; returns the response and the writer of its request body.
func connect(_ client: HTTPClient, _ enrollment: RelayEnrollment, first: [UplinkFrame]) async throws
    -> (HTTPClientResponse, AsyncStream<ByteBuffer>.Continuation)
{
    let (body, sink) = AsyncStream<ByteBuffer>.makeStream()
    var request = HTTPClientRequest(url: url + "/v1/uplink")
    request.method = .POST
    request.headers.add(name: "authorization", value: enrollment.bearer)
    request.body = .stream(body, length: .unknown)
    for frame in first { sink.yield(ByteBuffer(bytes: frame.encoded() + Data("\n".utf8))) }
    return (try await client.execute(request, deadline: .distantFuture), sink)
}

/// Opens an uplink as lines on TLS and waits for its "ready" line; the channel.
func connectLines(_ enrollment: RelayEnrollment, acknowledging: Bool = false) async throws -> any Channel {
    guard let base = URL(string: url), let host = base.host, let port = base.port else { throw EnrollmentRefused(description: "bad URL \(url)") }
    var tls = TLSConfiguration.makeClientConfiguration()
    tls.additionalTrustRoots = [.file(ca)]
    tls.applicationProtocols = [UplinkFrame.alpn]
    let context = try NIOSSLContext(configuration: tls)
    let ready = MultiThreadedEventLoopGroup.singleton.any().makePromise(of: Void.self)
    let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(try NIOSSLClientHandler(context: context, serverHostname: host))
                try channel.pipeline.syncOperations.addHandler(ReadyLine(ready: ready, acknowledging: acknowledging))
            }
        }
        .connect(host: host, port: port).get()
    try await channel.writeAndFlush(ByteBuffer(string: enrollment.bearer + "\n"))
    try await ready.futureResult.get()
    return channel
}

/// Succeeds `ready` when the relay's "ready" line comes; fails it if the connection ends first.
/// `acknowledging`: then acknowledges every push.
final class ReadyLine: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    let ready: EventLoopPromise<Void>
    let acknowledging: Bool
    private var lines = UplinkLines()
    private var answered = false
    init(ready: EventLoopPromise<Void>, acknowledging: Bool) {
        self.ready = ready
        self.acknowledging = acknowledging
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let read = (try? lines.append(unwrapInboundIn(data).readableBytesView)) ?? []
        if acknowledging {
            var acks = ByteBuffer()
            for line in read {
                if case .push(let push)? = UplinkFrame.decode(line) {
                    acks.writeBytes(UplinkFrame.ack(seq: push.seq).encoded() + Data("\n".utf8))
                }
            }
            if acks.readableBytes > 0 { context.writeAndFlush(NIOAny(acks), promise: nil) }
        }
        for line in read where !answered {
            switch UplinkFrame.decode(line) {
            case .ready?:
                answered = true
                ready.succeed()
            case .closing(let code, let reason)?:
                answered = true
                ready.fail(EnrollmentRefused(description: "the relay ended the uplink: \(code): \(reason)"))
            default: break
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if !answered {
            answered = true
            ready.fail(EnrollmentRefused(description: "the relay closed the uplink"))
        }
        context.fireChannelInactive()
    }
}

/// Waits until standard input closes (the script's signal to stop).
func stdinClosed() async {
    await withCheckedContinuation { continuation in
        Thread {
            while !FileHandle.standardInput.availableData.isEmpty {}
            continuation.resume()
        }.start()
    }
}

switch mode {
case "bare":  // N connections that enrolled and then sit idle: the connection's cost without an uplink
    let count = Int(arguments[4]) ?? 1000
    var held: [HTTPClient] = []
    for _ in 0..<count {
        var configuration = HTTPClient.Configuration(tlsConfiguration: {
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.additionalTrustRoots = [.file(ca)]
            return tls
        }())
        configuration.httpVersion = .automatic
        configuration.connectionPool = .init(idleTimeout: .seconds(3600))
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        _ = try await enroll(client)
        held.append(client)
    }
    print("ready \(held.count)")
    fflush(nil)
    await stdinClosed()
    for client in held { try? await client.shutdown() }
case "idle":
    let count = Int(arguments[4]) ?? 1000
    var held: [(HTTPClient, HTTPClientResponse, AsyncStream<ByteBuffer>.Continuation)] = []
    for _ in 0..<count {
        let client = makeClient()
        let enrollment = try await enroll(client)
        let (response, sink) = try await connect(client, enrollment, first: [])
        held.append((client, response, sink))
    }
    print("ready \(held.count)")
    fflush(nil)
    await stdinClosed()
    for (client, _, sink) in held {
        sink.finish()
        try? await client.shutdown()
    }
case "lines":
    let count = Int(arguments[4]) ?? 1000
    let enroller = makeClient()
    var held: [any Channel] = []
    for _ in 0..<count {
        held.append(try await connectLines(try await enroll(enroller)))
    }
    // Only the uplinks stay open: the relay's memory is theirs.
    try await enroller.shutdown()
    print("ready \(held.count)")
    fflush(nil)
    await stdinClosed()
    for channel in held { try? await channel.close() }
case "line-device":
    let token = arguments[4]
    let client = makeClient()
    let channel = try await connectLines(try await enroll(client), acknowledging: true)
    try await channel.writeAndFlush(
        ByteBuffer(bytes: UplinkFrame.register(token: token, topic: "com.example.bench").encoded() + Data("\n".utf8)))
    print("ready")
    fflush(nil)
    await stdinClosed()
    try? await channel.close()
    try? await client.shutdown()
default:
    let token = arguments[4]
    let client = makeClient()
    let enrollment = try await enroll(client)
    let (response, sink) = try await connect(client, enrollment, first: [.register(token: token, topic: "com.example.bench")])
    let acked = Task {
        var count = 0
        var lines = UplinkLines()
        for try await buffer in response.body {
            for line in try lines.append(buffer.readableBytesView) {
                switch UplinkFrame.decode(line) {
                case .push(let push)?:
                    sink.yield(ByteBuffer(bytes: UplinkFrame.ack(seq: push.seq).encoded() + Data("\n".utf8)))
                    count += 1
                case .ready?:
                    print("ready")
                    fflush(nil)
                default: break
                }
            }
        }
        return count
    }
    await stdinClosed()
    sink.finish()
    acked.cancel()
    print("acknowledged \((try? await acked.value) ?? -1)")
    try? await client.shutdown()
}
