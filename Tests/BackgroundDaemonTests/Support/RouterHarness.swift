import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore

/// bgd's `/v1/` router driven without a socket: a real daemon's services and store (a real
/// SQLite file), its routes and middleware, requests handed straight to the router.
struct RouterHarness {
    let client: any TestClientProtocol
    let daemon: Daemon
    let operatorToken: String

    struct Answer {
        var status: HTTPResponse.Status
        var body: ByteBuffer
        func decode<T: Decodable>(_ type: T.Type) throws -> T {
            try WireCoding.makeDecoder().decode(T.self, from: Data(buffer: body))
        }
        /// The API error's stable code, or nil when the answer is not an error.
        var errorCode: String? { try? decode(APIErrorBody.self).error }
    }

    static func with(_ body: @Sendable (RouterHarness) async throws -> Void) async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        var logger = Logger(label: "bg.daemon")
        logger.logLevel = .critical
        let daemon = try await Daemon(
            configuration: Daemon.Configuration(
                stateDirectory: directory + "/state", socketPath: directory + "/bgd.sock", durability: .normal,
                conditions: .init(sensing: .fixed(.unconstrained)), appCgroups: false),
            clock: ManualClock(), logger: logger)
        let token = try String(contentsOfFile: daemon.operatorCredential.path, encoding: .utf8)
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let application = Application(router: daemon.apiRouter())
        try await application.test(.router) { client in
            try await body(RouterHarness(client: client, daemon: daemon, operatorToken: token))
        }
    }

    /// A request as the operator (`bgctl`), or as the app holding `appToken`, or with no token.
    enum Caller {
        case `operator`
        case app(String)
        case nobody
    }

    func call(
        _ method: HTTPRequest.Method, _ path: String, as caller: Caller = .operator,
        json: (some Encodable)? = nil as String?
    ) async throws -> Answer {
        var headers = HTTPFields()
        switch caller {
        case .operator: headers[.authorization] = "Bearer \(operatorToken)"
        case .app(let token): headers[.authorization] = "Bearer \(token)"
        case .nobody: break
        }
        var buffer: ByteBuffer?
        if let json {
            headers[.contentType] = "application/json"
            buffer = ByteBuffer(bytes: try WireCoding.makeEncoder().encode(json))
        }
        return try await client.execute(uri: path, method: method, headers: headers, body: buffer) { response in
            Answer(status: response.status, body: response.body)
        }
    }

    /// Registers an app that runs `/bin/true`; answers its token.
    func register(_ id: String, taskIdentifiers: [String] = []) async throws -> String {
        let answer = try await call(
            .post, "/v1/apps",
            json: RegisterAppRequest(
                id: AppID(rawValue: id)!, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum,
                taskIdentifiers: taskIdentifiers))
        return try answer.decode(RegisteredApp.self).token
    }
}
