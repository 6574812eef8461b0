import BackgroundModel
import Foundation
import Hummingbird
import NIOCore

extension Request {
    /// Reads and decodes a JSON body, with the API's limit and its error shapes.
    mutating func decodeJSON<T: Decodable>(_ type: T.Type) async throws -> T {
        let buffer = try await collectBody(upTo: APIRequestContext.bodyLimit)
        let data = Data(buffer: buffer)
        do {
            return try WireCoding.makeDecoder().decode(type, from: data)
        } catch let error as DecodingError {
            // Foundation's decoder calls a number that does not fit its field (1.5 for a count,
            // 1e300) "not valid JSON", naming no field: said as what it is when the JSON parses.
            if case .dataCorrupted(let context) = error, context.codingPath.isEmpty,
                (try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed])) != nil
            {
                throw APIError(
                    .badRequest, .malformedRequest,
                    "the JSON body is not what this endpoint takes: a number in it does not fit its field (a whole number where a count, an id or a pid goes; every number within its field's range)"
                )
            }
            throw APIError(
                .badRequest, .malformedRequest, "the JSON body is not what this endpoint takes: \(error.summary)")
        } catch {
            throw APIError(.badRequest, .malformedRequest, "the body is not valid JSON")
        }
    }
}

extension Parameters {
    func appID() throws -> AppID {
        let raw = get("id") ?? ""
        guard let id = AppID(rawValue: raw) else { throw APIError(.badRequest, .invalidAppID, AppID.requirement) }
        return id
    }

    func runID() throws -> RunID {
        guard let raw = get("run"), let value = Int64(raw), value > 0 else {
            throw APIError(.badRequest, .invalidRunID, "a run id is a positive integer")
        }
        return RunID(value)
    }
}

extension DecodingError {
    /// One line a person can act on.
    var summary: String {
        func path(_ context: Context) -> String {
            let keys = context.codingPath.map { $0.intValue.map { "[\($0)]" } ?? $0.stringValue }.joined(separator: ".")
            return keys.isEmpty ? "the body" : "'\(keys)'"
        }
        switch self {
        case .keyNotFound(let key, let context):
            let parent = path(context)
            return "missing '\(key.stringValue)'" + (parent == "the body" ? "" : " in \(parent)")
        case .typeMismatch(_, let context): return "\(path(context)) has the wrong type: \(context.debugDescription)"
        case .valueNotFound(_, let context): return "\(path(context)) is null"
        case .dataCorrupted(let context): return "\(path(context)): \(context.debugDescription)"
        @unknown default: return "unreadable"
        }
    }
}

/// Writes Codable values as JSON responses.
enum JSONResponse {
    static func make<T: Encodable>(_ value: T, status: HTTPResponse.Status = .ok) throws -> Response {
        make(encoded: try WireCoding.makeEncoder().encode(value), status: status)
    }

    /// A response of JSON already encoded.
    static func make(encoded data: Data, status: HTTPResponse.Status = .ok) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}

extension APIRequestContext {
    /// The `:id` path parameter as an app id (400 when it is not one).
    func appID() throws -> AppID { try parameters.appID() }
}
