import BackgroundGateway
import NIOCore
import NIOHTTP1
import NIOHTTP2
import NIOPosix
import NIOSSL

// The floor under bgrelay's memory per idle uplink: TLS + HTTP/2 on SwiftNIO alone — no
// Hummingbird, no Swift task per connection or stream — with one channel handler per stream that
// answers an enrollment and holds an uplink open (a "ready" line, keep-alives echoed). It stores
// nothing and checks no credential: it is the cost of the connection and its stream, which any
// uplink server speaking this protocol pays. Its connections take their buffers as bgrelay's
// uplinks do (`ConnectionBuffers.idle`). Benchmarks/relay.sh holds 1,000 simulated devices
// (bgbench-relay idle) on it and on bgrelay and prints both per uplink.
//
//   bgbench-uplink-floor CERT KEY [HEADER-TABLE-SIZE | line | tcp]
//       listens on 127.0.0.1 (a free port), prints "port N"; HPACK's table as the peer may use
//       it (our SETTINGS_HEADER_TABLE_SIZE; 4096 by default, as every HTTP/2 server's). `line`:
//       no HTTP at all — lines straight on TLS (the first one, a credential, answered "ready",
//       then empty lines echoed); `tcp`: the same without TLS. Those two split the floor into
//       what the socket and channel cost, what TLS adds, and what HTTP/2 adds on top
//       (Benchmarks/uplink_idle.py holds their connections).

let arguments = CommandLine.arguments
guard arguments.count >= 3 else {
    print("usage: bgbench-uplink-floor CERT KEY [HEADER-TABLE-SIZE | line | tcp]")
    exit(64)
}
let mode = arguments.count > 3 ? arguments[3] : "4096"
let headerTable = Int(mode) ?? 4096

/// One stream: POST /v1/devices answers an enrollment; POST /v1/uplink answers "ready" and then
/// echoes each empty line (a keep-alive) for as long as the device keeps it open.
final class FloorStream: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    private var uplink = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            uplink = head.uri.hasPrefix("/v1/uplink")
            var headers = HTTPHeaders()
            headers.add(name: "content-type", value: uplink ? "application/x-ndjson" : "application/json")
            context.write(
                wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: .ok, headers: headers))),
                promise: nil)
            if uplink {
                let ready = #"{"type":"ready","device":"0123456789abcdef0123456789abcdef"}"# + "\n"
                context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: ready)))), promise: nil)
            }
        case .body(let body):
            guard uplink else { return }
            let lines = body.readableBytesView.filter { $0 == UInt8(ascii: "\n") }.count
            if lines > 0 {
                context.writeAndFlush(
                    wrapOutboundOut(.body(.byteBuffer(ByteBuffer(repeating: UInt8(ascii: "\n"), count: lines)))),
                    promise: nil)
            }
        case .end:
            if !uplink {
                let enrollment =
                    #"{"url":"","device":"\#(String(repeating: "ab", count: 16))","secret":"\#(String(repeating: "cd", count: 32))"}"#
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: enrollment)))), promise: nil)
            }
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

/// A connection that speaks lines with no HTTP: the first line (a credential) is answered with
/// "ready", each empty line after it echoed.
final class FloorLines: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer
    private var ready = false

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var lines = unwrapInboundIn(data).readableBytesView.filter { $0 == UInt8(ascii: "\n") }.count
        guard lines > 0 else { return }
        if !ready {
            ready = true
            lines -= 1
            let line = #"{"type":"ready","device":"0123456789abcdef0123456789abcdef"}"# + "\n"
            context.write(wrapOutboundOut(ByteBuffer(string: line)), promise: nil)
        }
        context.writeAndFlush(wrapOutboundOut(ByteBuffer(repeating: UInt8(ascii: "\n"), count: lines)), promise: nil)
    }
}

let chain = try NIOSSLCertificate.fromPEMFile(arguments[1]).map { NIOSSLCertificateSource.certificate($0) }
var tls = TLSConfiguration.makeServerConfiguration(
    certificateChain: chain, privateKey: .privateKey(try NIOSSLPrivateKey(file: arguments[2], format: .pem)))
tls.applicationProtocols = Int(mode) == nil ? [] : ["h2"]
let context = try NIOSSLContext(configuration: tls)
let settings = [
    HTTP2Setting(parameter: .maxConcurrentStreams, value: 100),
    HTTP2Setting(parameter: .maxHeaderListSize, value: 16_384),
    HTTP2Setting(parameter: .headerTableSize, value: headerTable),
]
let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
    .serverChannelOption(.backlog, value: 1024)
    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
    .childChannelOption(.allocator, value: ConnectionBuffers.idle.allocator)
    .childChannelOption(.recvAllocator, value: ConnectionBuffers.idle.receive)
    .childChannelInitializer { channel in
        if mode == "line" || mode == "tcp" {
            return channel.eventLoop.makeCompletedFuture {
                if mode == "line" {
                    try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
                }
                try channel.pipeline.syncOperations.addHandler(FloorLines())
            }
        }
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: context))
        }.flatMap {
            channel.configureHTTP2Pipeline(mode: .server, initialLocalSettings: settings) { stream in
                stream.eventLoop.makeCompletedFuture {
                    try stream.pipeline.syncOperations.addHandlers([
                        HTTP2FramePayloadToHTTP1ServerCodec(), FloorStream(),
                    ])
                }
            }.map { _ in }
        }
    }
    .bind(host: "127.0.0.1", port: 0).get()
print("port \(server.localAddress?.port ?? 0)")
fflush(nil)
try await server.closeFuture.get()
