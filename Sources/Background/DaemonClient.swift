import AsyncHTTPClient
import BackgroundModel
import Foundation
import NIOCore
import NIOHTTP1

/// Talks HTTP/1.1 + JSON to bgd over its Unix socket. Apps use it through
/// `BackgroundApplication`; `bgctl` uses it directly.
public struct DaemonClient: Sendable {
    public let socketPath: String
    /// Sent as `Authorization: Bearer …` when set (the app endpoints need it). Without one the
    /// client is the operator's (`bgctl`): it sends the operator token bgd keeps beside its
    /// socket, read afresh for each request (bgd may have started since).
    public let token: String?
    public let transport: Transport
    private let http: HTTPClient

    /// How requests reach bgd (a stream always goes through the event loop).
    public enum Transport: Sendable {
        /// AsyncHTTPClient's shared client: connections kept and reused; what an app wants.
        case eventLoop
        /// Each request on a connection of its own, on the calling thread, with no event loop
        /// started: what a command-line tool that asks a thing or two and exits wants (bgctl).
        /// The call blocks its thread until bgd answers or `timeout` passes.
        case direct
    }

    public init(
        socketPath: String = DaemonLocation.defaultSocketPath(), token: String? = nil, transport: Transport = .eventLoop
    ) {
        self.socketPath = socketPath
        self.token = token
        self.transport = transport
        self.http = HTTPClient.shared
    }

    public enum Method: Sendable {
        case get, post, put, delete
        var nio: HTTPMethod {
            switch self {
            case .get: .GET
            case .post: .POST
            case .put: .PUT
            case .delete: .DELETE
            }
        }
    }

    private struct Empty: Encodable {}

    /// Sends a request and decodes a JSON answer.
    public func send<Answer: Decodable>(
        _ method: Method, _ path: String, body: (some Encodable)? = nil as String?, as type: Answer.Type = Answer.self,
        timeout: Duration = .seconds(30)
    ) async throws -> Answer {
        let data = try await exchange(method, path, body: body, timeout: timeout)
        do {
            return try WireCoding.makeDecoder().decode(Answer.self, from: data)
        } catch {
            throw BackgroundError.protocolViolation(
                "\(path) answered \(String(decoding: data.prefix(200), as: UTF8.self))")
        }
    }

    /// Sends a request and returns its JSON answer as bgd wrote it, undecoded: what `bgctl
    /// --json` prints, so a script reads bgd's own bytes (no rounding of times on the way) and
    /// the command pays for no decoding.
    public func sendForJSON(
        _ method: Method, _ path: String, body: (some Encodable)? = nil as String?, timeout: Duration = .seconds(30)
    ) async throws -> Data {
        try await exchange(method, path, body: body, timeout: timeout)
    }

    /// Sends a request whose answer has no body worth reading (204).
    public func send(
        _ method: Method, _ path: String, body: (some Encodable)? = nil as String?, timeout: Duration = .seconds(30)
    )
        async throws
    {
        _ = try await exchange(method, path, body: body, timeout: timeout)
    }

    private func exchange(
        _ method: Method, _ path: String, body: (some Encodable)?, timeout: Duration
    ) async throws -> Data {
        let encoded = try body.map { try WireCoding.makeEncoder().encode($0) }
        // Socket activation: this very request may be what starts bgd (bgd.socket), and bgd
        // writes the operator token as it starts — after this client looked for it. Once the
        // token is there, the request goes again with it.
        let couldAskAgain = token == nil && Self.operatorToken(socketPath: socketPath) == nil
        var attempt = 0
        while true {
            attempt += 1
            let (status, data) =
                switch transport {
                case .eventLoop: try await exchangeOnTheEventLoop(method, path, body: encoded, timeout: timeout)
                case .direct: try exchangeDirectly(method, path, body: encoded, timeout: timeout)
                }
            if (200..<300).contains(status) { return data }
            let error = Self.apiError(HTTPResponseStatus(statusCode: status), data)
            if couldAskAgain, attempt == 1, error.apiCode == APIErrorCode.operatorCredentialRequired.rawValue,
                Self.operatorToken(socketPath: socketPath) != nil
            {
                continue
            }
            throw error
        }
    }

    private func exchangeOnTheEventLoop(
        _ method: Method, _ path: String, body: Data?, timeout: Duration
    ) async throws -> (Int, Data) {
        var request = try makeRequest(method, path, timeout: timeout)
        if let body {
            request.body = .bytes(ByteBuffer(bytes: body))
            request.headers.add(name: "Content-Type", value: "application/json")
        }
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, timeout: .milliseconds(Int64(timeout.seconds * 1000)))
        } catch let error as HTTPClientError where error == .deadlineExceeded || error == .readTimeout {
            throw BackgroundError.daemonUnresponsive(socketPath, within: timeout)
        } catch {
            throw BackgroundError.daemonUnreachable(socketPath, "\(error)")
        }
        let buffer = try await response.body.collect(upTo: DirectExchange.answerLimit)
        return (Int(response.status.code), Data(buffer.readableBytesView))
    }

    private func exchangeDirectly(
        _ method: Method, _ path: String, body: Data?, timeout: Duration
    ) throws -> (Int, Data) {
        var headers: [(String, String)] = []
        if let bearer { headers.append(("Authorization", "Bearer \(bearer)")) }
        if body != nil { headers.append(("Content-Type", "application/json")) }
        do {
            let answer = try DirectExchange.send(
                socketPath: socketPath, method: method.nio.rawValue, path: path, headers: headers, body: body,
                timeout: timeout)
            return (answer.status, answer.body)
        } catch where error.timedOut {
            throw BackgroundError.daemonUnresponsive(socketPath, within: timeout)
        } catch where error.permissionDenied {
            throw BackgroundError.socketNotPermitted(socketPath)
        } catch {
            throw BackgroundError.daemonUnreachable(socketPath, error.reason)
        }
    }

    /// Opens a newline-delimited JSON stream (the app's events).
    public func stream(_ path: String) async throws -> StreamMessages {
        let request = try makeRequest(.get, path, timeout: Self.streamConnectTimeout)
        let response: HTTPClientResponse
        do {
            response = try await http.execute(request, deadline: .distantFuture)
        } catch {
            throw BackgroundError.daemonUnreachable(socketPath, "\(error)")
        }
        guard response.status == .ok else {
            let buffer = try await response.body.collect(upTo: 1024 * 1024)
            throw Self.apiError(response.status, Data(buffer.readableBytesView))
        }
        return StreamMessages(body: response.body)
    }

    /// How long opening the event stream waits for bgd to take the connection.
    static let streamConnectTimeout = Duration.seconds(30)

    private func makeRequest(_ method: Method, _ path: String, timeout: Duration) throws -> HTTPClientRequest {
        if let problem = SocketProbe.problem(connectingTo: socketPath, timeout: timeout) {
            if problem.timedOut { throw BackgroundError.daemonUnresponsive(socketPath, within: timeout) }
            throw problem.permissionDenied
                ? BackgroundError.socketNotPermitted(socketPath)
                : BackgroundError.daemonUnreachable(socketPath, problem.reason)
        }
        guard let url = URL(httpURLWithSocketPath: socketPath, uri: path) else {
            throw BackgroundError.daemonUnreachable(socketPath, "not a usable socket path")
        }
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = method.nio
        if let bearer { request.headers.add(name: "Authorization", value: "Bearer \(bearer)") }
        return request
    }

    /// The app's token, or else the operator's as it is now (read for each request).
    private var bearer: String? { token ?? Self.operatorToken(socketPath: socketPath) }

    /// The operator token beside the socket, if this user can read it.
    public static func operatorToken(socketPath: String) -> String? {
        guard
            let text = try? String(
                contentsOfFile: DaemonLocation.operatorTokenPath(socketPath: socketPath), encoding: .utf8)
        else { return nil }
        let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
        return token.isEmpty ? nil : token
    }

    private static func apiError(_ status: HTTPResponseStatus, _ data: Data) -> BackgroundError {
        if let body = try? WireCoding.makeDecoder().decode(APIErrorBody.self, from: data) {
            return .api(status: Int(status.code), code: body.error, reason: body.reason)
        }
        return .api(status: Int(status.code), code: "http\(status.code)", reason: "bgd answered \(status)")
    }
}
