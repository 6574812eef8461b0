import BackgroundModel
import Crypto
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

/// An HTTP origin on loopback that serves deterministic bodies and misbehaves on request, for
/// testing transfers against a real server (reliability-matrix A10.1's "toy origin").
///
/// `GET /files/<seed>/<size>` serves `size` pseudo-random bytes from `seed`; its SHA-256 is
/// `FaultyOrigin.sha256(seed:size:)`. Faults come as query items and, with `times=K`, apply to
/// the first K requests of that URL only (then it behaves):
/// `drop-after=N` (close after N body bytes), `stall-after=N` (send N bytes, then nothing),
/// `ignore-range`, `etag=rotate|weak|none` (rotate: every request is a new version with other
/// bytes), `wrong-content-range`, `status=416|429|500|503`, `retry-after=S`,
/// `redirect=K` (a chain of K redirects), `location=URL` (a 302 to URL, as given), `gzip` (claims `Content-Encoding: gzip`),
/// `disposition=NAME` (a `Content-Disposition` filename), `rate=B` (about B bytes a second).
/// `POST|PUT /upload` stores the body and counts requests per `Idempotency-Key`.
public final class FaultyOrigin: Sendable {
    public let port: Int
    public var baseURL: URL { URL(string: "http://127.0.0.1:\(port)")! }
    private let state: OriginState
    private let group: ServiceGroup
    private let task: Task<Void, any Error>
    private let stallGate: AsyncStream<Void>
    private let stallRelease: AsyncStream<Void>.Continuation

    final class OriginState: Sendable {
        let mutex = Mutex(State())
        func withLock<T>(_ body: (inout State) -> T) -> T { mutex.withLock { body(&$0) } }
    }

    struct State {
        var requests: [String: Int] = [:]
        var log: [RequestRecord] = []
        var uploads: [String: [Data]] = [:]
        var bytesServed = 0
        var servedWaiters: [(bytes: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    /// What the origin saw of one request.
    public struct RequestRecord: Sendable {
        public var path: String
        public var range: String?
        public var ifRange: String?
        public var status: Int
        public var acceptEncoding: String?
    }

    /// Starts an origin on a free loopback port.
    public static func start() async throws -> FaultyOrigin {
        let (ready, readyContinuation) = AsyncStream<Int>.makeStream()
        let origin = FaultyOrigin(ready: readyContinuation)
        for await port in ready {
            return FaultyOrigin(copying: origin, port: port)
        }
        throw CancellationError()
    }

    private init(ready: AsyncStream<Int>.Continuation) {
        port = 0
        let state = OriginState()
        self.state = state
        (stallGate, stallRelease) = AsyncStream<Void>.makeStream()
        let router = Router()
        let gate = stallGate
        router.get("files/:seed/:size") { request, context in
            try await Self.serveFile(request, context: context, state: state, stall: gate)
        }
        router.post("upload") { request, _ in try await Self.receiveUpload(request, state: state) }
        router.put("upload") { request, _ in try await Self.receiveUpload(request, state: state) }
        var logger = Logger(label: "bg.test.origin")
        logger.logLevel = .critical
        let application = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in
                ready.yield(channel.localAddress?.port ?? 0)
                ready.finish()
            }, logger: logger)
        group = ServiceGroup(configuration: .init(services: [application], logger: logger))
        let group = self.group
        task = Task { try await group.run() }
    }

    private init(copying other: FaultyOrigin, port: Int) {
        self.port = port
        state = other.state
        group = other.group
        task = other.task
        stallGate = other.stallGate
        stallRelease = other.stallRelease
    }

    public func stop() async {
        stallRelease.finish()
        for waiter in state.withLock({ state in
            defer { state.servedWaiters = [] }; return state.servedWaiters.map(\.continuation)
        }) {
            waiter.resume()
        }
        await group.triggerGracefulShutdown()
        _ = try? await task.value
    }

    /// The URL of a body; `faults` as query items (`["drop-after": "1000", "times": "1"]`).
    public func url(seed: Int, size: Int, faults: [String: String] = [:]) -> URL {
        var components = URLComponents(
            url: baseURL.appendingPathComponent("files/\(seed)/\(size)"), resolvingAgainstBaseURL: false)!
        if !faults.isEmpty {
            components.queryItems = faults.sorted { $0.key < $1.key }.map {
                URLQueryItem(name: $0.key, value: $0.value)
            }
        }
        return components.url!
    }

    public var requests: [RequestRecord] { state.withLock { $0.log } }
    /// Body bytes written to clients so far, all requests together.
    public var bytesServed: Int { state.withLock { $0.bytesServed } }
    /// Returns once at least `bytes` body bytes have been served in all (an event, not a poll).
    public func waitUntilServed(_ bytes: Int) async {
        await withCheckedContinuation { continuation in
            let now = state.withLock { state -> Bool in
                if state.bytesServed >= bytes { return true }
                state.servedWaiters.append((bytes, continuation))
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Upload bodies received, by Idempotency-Key.
    public var uploads: [String: [Data]] { state.withLock { $0.uploads } }

    // MARK: Bodies

    /// The body for `seed` and `size`: SplitMix64, 8 bytes at a time.
    public static func body(seed: Int, size: Int, from start: Int = 0) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(max(0, size - start))
        var index = start / 8
        var skip = start % 8
        while buffer.writerIndex < size - start {
            var word = Self.word(seed: seed, index: index).littleEndian
            withUnsafeBytes(of: &word) { bytes in
                let slice = bytes[skip..<min(8, skip + (size - start - buffer.writerIndex))]
                buffer.writeBytes(slice)
            }
            skip = 0
            index += 1
        }
        return buffer
    }

    public static func sha256Digest(of data: Data) -> String {
        SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    public static func sha256(seed: Int, size: Int) -> String {
        var hasher = SHA256()
        var offset = 0
        while offset < size {
            let chunk = min(1 << 20, size - offset)
            let buffer = body(seed: seed, size: offset + chunk, from: offset)
            buffer.withUnsafeReadableBytes { hasher.update(bufferPointer: $0) }
            offset += chunk
        }
        return hasher.finalize().map { String(format: "%02x", $0) }.joined()
    }

    private static func word(seed: Int, index: Int) -> UInt64 {
        var z = UInt64(bitPattern: Int64(seed)) &* 0x9E37_79B9_7F4A_7C15 &+ UInt64(index) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    // MARK: Serving

    private static func serveFile(
        _ request: Request, context: some RequestContext, state: OriginState, stall: AsyncStream<Void>
    ) async throws -> Response {
        guard let seed = context.parameters.get("seed", as: Int.self),
            let size = context.parameters.get("size", as: Int.self),
            size >= 0, size <= 1 << 34
        else { return Response(status: .badRequest) }
        let query = request.uri.queryParameters
        let key = request.uri.description
        let count = state.withLock { state -> Int in
            state.requests[key, default: 0] += 1
            return state.requests[key]!
        }
        let times = query["times"].flatMap { Int(String($0)) } ?? Int.max
        let faulty = count <= times
        // Passing faults (drops, stalls, statuses, redirects) honour `times`; the server's ways
        // (ranges, validators, encodings, rate) hold for every request.
        let passing: Set<String> = ["drop-after", "stall-after", "status", "retry-after", "redirect", "location"]
        func fault(_ name: String) -> String? {
            (faulty || !passing.contains(name)) ? query[name[...]].map(String.init) : nil
        }
        let range = request.headers[.range]
        let ifRange = request.headers[HTTPField.Name("If-Range")!]
        let acceptEncoding = request.headers[.acceptEncoding]
        func record(_ status: Int) {
            state.withLock {
                $0.log.append(
                    RequestRecord(
                        path: key, range: range, ifRange: ifRange, status: status, acceptEncoding: acceptEncoding))
            }
        }

        if let hops = fault("redirect").flatMap(Int.init), hops > 0 {
            var next = URLComponents(string: key)!
            var items = (next.queryItems ?? []).filter { $0.name != "redirect" }
            items.append(URLQueryItem(name: "redirect", value: String(hops - 1)))
            items.append(URLQueryItem(name: "hop", value: String(count)))
            next.queryItems = items
            record(302)
            return Response(status: .found, headers: [.location: next.string!])
        }
        if let location = fault("location") {
            record(302)
            return Response(status: .found, headers: [.location: location])
        }
        if let status = fault("status").flatMap(Int.init) {
            var headers: HTTPFields = [:]
            if let retryAfter = fault("retry-after") { headers[.retryAfter] = retryAfter }
            if status == 416 { headers[.contentRange] = "bytes */\(size)" }
            record(status)
            return Response(
                status: .init(code: status), headers: headers,
                body: .init(byteBuffer: ByteBuffer(string: "error body \(status)")))
        }

        // Rotating versions carry other bytes: a resume across versions would mix files.
        let version = fault("etag") == "rotate" ? count : 0
        let bodySeed = seed &+ version
        var headers: HTTPFields = [.contentType: "application/octet-stream"]
        let tag: String?
        switch fault("etag") {
        case "weak": tag = "W/\"s\(seed)\""
        case "none": tag = nil
        case "rotate": tag = "\"s\(seed)v\(version)\""
        default: tag = "\"s\(seed)\""
        }
        if let tag { headers[.eTag] = tag }
        if fault("gzip") != nil { headers[.contentEncoding] = "gzip" }
        if let name = fault("disposition") { headers[.contentDisposition] = "attachment; filename=\"\(name)\"" }

        var start = 0
        var status = HTTPResponse.Status.ok
        if let range, fault("ignore-range") == nil, range.hasPrefix("bytes="),
            let from = Int(range.dropFirst(6).prefix { $0 != "-" }),
            ifRange == nil || ifRange == tag
        {
            guard from < size else {
                record(416)
                return Response(status: .rangeNotSatisfiable, headers: [.contentRange: "bytes */\(size)"])
            }
            start = from
            status = .partialContent
            let shownStart = fault("wrong-content-range") != nil ? max(0, from - 100) : from
            headers[.contentRange] = "bytes \(shownStart)-\(size - 1)/\(size)"
        }
        let length = size - start
        let offset = start
        headers[.contentLength] = String(length)
        let dropAfter = fault("drop-after").flatMap(Int.init)
        let stallAfter = fault("stall-after").flatMap(Int.init)
        let rate = fault("rate").flatMap(Int.init)
        record(Int(status.code))
        return Response(
            status: status, headers: headers,
            body: ResponseBody(contentLength: length) { writer in
                var sent = 0
                let chunk = 64 << 10
                while sent < length {
                    var piece = min(chunk, length - sent)
                    if let dropAfter, dropAfter >= sent { piece = min(piece, dropAfter - sent) }
                    if let stallAfter, stallAfter >= sent { piece = min(piece, stallAfter - sent) }
                    if piece > 0 {
                        try await writer.write(
                            Self.body(seed: bodySeed, size: offset + sent + piece, from: offset + sent))
                        sent += piece
                        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
                            state.bytesServed += piece
                            let served = state.bytesServed
                            let ready = state.servedWaiters.filter { $0.bytes <= served }.map(\.continuation)
                            state.servedWaiters.removeAll { $0.bytes <= served }
                            return ready
                        }
                        for waiter in ready { waiter.resume() }
                        // `rate=B`: about B bytes a second, in 64 KiB steps.
                        if let rate, rate > 0 {
                            try await ContinuousClock().sleep(for: .seconds(Double(piece) / Double(rate)))
                        }
                    }
                    if let dropAfter, sent >= dropAfter { throw OriginFault.dropped }
                    if let stallAfter, sent >= stallAfter {
                        for await _ in stall {}
                        throw OriginFault.dropped
                    }
                }
                try await writer.finish(nil)
            })
    }

    private static func receiveUpload(_ request: Request, state: OriginState) async throws -> Response {
        let body = try await request.body.collect(upTo: 1 << 30)
        let key = request.headers[HTTPField.Name("Idempotency-Key")!] ?? "none"
        let count = state.withLock { state -> Int in
            state.uploads[key, default: []].append(Data(buffer: body))
            state.requests["upload:" + key, default: 0] += 1
            return state.requests["upload:" + key]!
        }
        let query = request.uri.queryParameters
        if let failTimes = query["fail"].flatMap({ Int(String($0)) }), count <= failTimes {
            return Response(status: .serviceUnavailable)
        }
        return Response(
            status: .created, body: .init(byteBuffer: ByteBuffer(string: "stored \(body.readableBytes) bytes")))
    }

    enum OriginFault: Error { case dropped }
}
