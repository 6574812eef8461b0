import AsyncHTTPClient
import Background
import Foundation
import NIOCore
import NIOHTTP1

/// Sends arbitrary bytes to bgd, for requests no well-behaved client would make.
enum RawHTTP {
    struct Answer {
        var status: Int
        var body: Data
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body)) as? [String: Any] ?? [:] }
        var errorCode: String? { json["error"] as? String }
    }

    static func request(
        _ socketPath: String, _ method: HTTPMethod, _ path: String, body: Data? = nil, token: String? = nil,
        anonymous: Bool = false, scheme: String = "Bearer"
    ) async throws -> Answer {
        // No token given: as the operator (bgctl), unless the test wants no credential at all.
        let token = anonymous ? nil : token ?? DaemonClient.operatorToken(socketPath: socketPath)
        var request = HTTPClientRequest(url: URL(httpURLWithSocketPath: socketPath, uri: path)!.absoluteString)
        request.method = method
        if let body { request.body = .bytes(ByteBuffer(bytes: body)) }
        if let token { request.headers.add(name: "Authorization", value: "\(scheme) \(token)") }
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
        let buffer = try await response.body.collect(upTo: 1 << 20)
        return Answer(status: Int(response.status.code), body: Data(buffer.readableBytesView))
    }
}
