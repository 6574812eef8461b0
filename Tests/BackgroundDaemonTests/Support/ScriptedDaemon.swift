import BackgroundModel
import BackgroundTesting
import Foundation
import HTTPTypes
import Hummingbird
import Logging
import NIOCore
import Synchronization

/// A peer on a Unix socket that answers the app API as bgd does, but says what the test scripts:
/// what a real bgd of this version never sends (an event of a kind a newer bgd has) or never
/// answers while the stream lives (an acknowledgement its full disk refuses). For the library's
/// side of the protocol only; everything bgd decides is tested against a real bgd.
final class ScriptedDaemon: Sendable {
    let socketPath: String

    private struct State {
        /// The lines still to write on each event stream opened, in order of opening.
        var streams: [AsyncStream<String>.Continuation] = []
        var acknowledged: [EventSequence] = []
        var refusedAcknowledgements: [EventSequence] = []
        /// How many of the next acknowledgements to refuse, as a full disk does (507).
        var acknowledgementsToRefuse = 0
        var results: [RunID: BackgroundFetchResult] = [:]
        /// How many of the next run results to refuse for now (503, a moment's trouble).
        var resultsToRefuse = 0
    }
    private let state = Mutex(State())

    private init(socketPath: String) { self.socketPath = socketPath }

    /// A scripted peer listening at a new socket for `body`, stopped after it.
    static func with(_ body: (ScriptedDaemon) async throws -> Void) async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let daemon = ScriptedDaemon(socketPath: directory + "/bgd.sock")
        let (listening, ready) = AsyncStream<Void>.makeStream()
        var logger = Logger(label: "scripted-bgd")
        logger.logLevel = .critical  // its shutdown under a cancelled task says "already closed"
        let application = Application(
            router: daemon.router(),
            configuration: .init(address: .unixDomainSocket(path: daemon.socketPath)),
            onServerRunning: { _ in ready.yield() }, logger: logger)
        let server = Task { try await application.runService(gracefulShutdownSignals: []) }
        defer {
            daemon.endStreams()
            server.cancel()
        }
        for await _ in listening { break }
        try await body(daemon)
    }

    /// Writes `line` on the newest event stream.
    func send(_ line: String) { state.withLock { $0.streams.last }?.yield(line) }

    func send(_ message: StreamMessage) throws {
        send(String(decoding: try WireCoding.makeEncoder().encode(message), as: UTF8.self))
    }

    /// Ends every event stream (bgd stopping).
    func endStreams() { for stream in state.withLock({ $0.streams }) { stream.finish() } }

    func refuseAcknowledgements(_ count: Int) { state.withLock { $0.acknowledgementsToRefuse = count } }

    func refuseResults(_ count: Int) { state.withLock { $0.resultsToRefuse = count } }

    var streamsOpened: Int { state.withLock { $0.streams.count } }
    var acknowledged: [EventSequence] { state.withLock { $0.acknowledged } }
    var refusedAcknowledgements: [EventSequence] { state.withLock { $0.refusedAcknowledgements } }
    var results: [RunID: BackgroundFetchResult] { state.withLock { $0.results } }

    private func router() -> Router<BasicRequestContext> {
        let router = Router()
        router.get("/v1/app/events") { _, _ -> Response in
            let (lines, writer) = AsyncStream<String>.makeStream()
            self.state.withLock { $0.streams.append(writer) }
            var headers = HTTPFields()
            headers[.contentType] = "application/x-ndjson"
            return Response(
                status: .ok, headers: headers,
                body: ResponseBody { body in
                    for await line in lines { try await body.write(ByteBuffer(string: line + "\n")) }
                    try await body.finish(nil)
                })
        }
        router.post("/v1/app/events/ack") { request, context -> Response in
            let acknowledgement = try await request.decode(as: EventAcknowledgement.self, context: context)
            let refused = self.state.withLock { state in
                guard state.acknowledgementsToRefuse > 0 else {
                    state.acknowledged.append(acknowledgement.seq)
                    return false
                }
                state.acknowledgementsToRefuse -= 1
                state.refusedAcknowledgements.append(acknowledgement.seq)
                return true
            }
            guard refused else { return Response(status: .noContent) }
            return try Self.json(
                APIErrorBody(error: "storageFull", reason: "bgd's disk is full"), status: .init(code: 507))
        }
        router.post("/v1/app/runs/:run/result") { request, context -> Response in
            let run = RunID(rawValue: Int64(context.parameters.get("run") ?? "") ?? 0)
            let report = try await request.decode(as: FetchResultReport.self, context: context)
            let refused = self.state.withLock { state in
                guard state.resultsToRefuse > 0 else {
                    state.results[run] = report.result
                    return false
                }
                state.resultsToRefuse -= 1
                return true
            }
            if refused {
                return try Self.json(
                    APIErrorBody(error: "storageUnavailable", reason: "bgd cannot write just now"),
                    status: .serviceUnavailable)
            }
            let now = Date(timeIntervalSince1970: 1_800_000_000)
            return try Self.json(
                RunRecord(
                    id: run, app: AppID(rawValue: "com.example.scripted")!, trigger: .manual, startedAt: now,
                    deadline: now, endedAt: now, outcome: RunOutcome(report.result), reasons: [], launched: false,
                    detail: nil))
        }
        router.post("/v1/app/state") { request, context -> Response in
            let report = try await request.decode(as: LifecycleReport.self, context: context)
            return try Self.json(
                LifecycleStatus(
                    app: AppID(rawValue: "com.example.scripted")!, state: report.state, processID: report.processID,
                    deadline: nil, tasks: []))
        }
        return router
    }

    private static func json(_ value: some Encodable, status: HTTPResponse.Status = .ok) throws -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(
            status: status, headers: headers,
            body: .init(byteBuffer: ByteBuffer(bytes: try WireCoding.makeEncoder().encode(value))))
    }
}
