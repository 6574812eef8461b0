import AsyncHTTPClient
import BackgroundModel
import Foundation
import NIOHTTP1

/// The engine follows redirects itself, checking each Location before a connection is made.
///
/// AsyncHTTPClient's own following hands a Location's port to NIO unchecked, and NIO traps on a
/// port it cannot hold (`http://127.0.0.1:99999/`): one redirect from a server could crash bgd,
/// and again at every start while the transfer is stored. Here a Location must pass
/// `ServerURL` like the request's own URL. The rules are otherwise
/// AsyncHTTPClient's: at most 5 redirects, no cycles, http and https only; a 303 (and a 301 or
/// 302 answering a POST) continues as a GET without the body; every other header goes along
/// (a download's `Range` and `If-Range` too: the resume rules judge the final answer).
struct Redirects {
    static let maximum = 5
    private static let statuses: Set<UInt> = [301, 302, 303, 307, 308]

    /// Why a redirect was not followed: the attempt fails for good.
    struct Refusal: Error {
        let error: TransferError
    }

    /// The request as it goes to one URL of the chain.
    struct Hop {
        var url: URL
        var method: HTTPMethod
        /// Whether the request's body still goes (not after a redirect that turned it into a GET).
        var withBody: Bool
    }

    /// Sends `request(hop)` for the first URL, and for each Location while the answer is a
    /// redirect; returns the first answer that is not. `drain` reads a redirect's body away.
    static func follow(
        from url: URL, method: HTTPMethod, request: (Hop) -> HTTPClientRequest,
        send: (HTTPClientRequest) async throws -> HTTPClientResponse,
        drain: (HTTPClientResponse.Body) async throws -> Void
    ) async throws -> HTTPClientResponse {
        var hop = Hop(url: url, method: method, withBody: true)
        var visited: Set<String> = [url.absoluteString]
        while true {
            let response = try await send(request(hop))
            guard statuses.contains(response.status.code), let location = response.headers.first(name: "Location")
            else { return response }
            try await drain(response.body)
            guard visited.count <= maximum else {
                throw Refusal(error: TransferError(.tooManyRedirects, "more than \(maximum) redirects"))
            }
            guard let next = URL(string: location, relativeTo: hop.url)?.absoluteURL else {
                throw Refusal(error: TransferError(.badURL, "redirected to \(quoted(location)), which is not a URL"))
            }
            if let problem = ServerURL.problem(with: next) {
                throw Refusal(error: TransferError(.badURL, "redirected to \(quoted(location)), which \(problem)"))
            }
            guard visited.insert(next.absoluteString).inserted else {
                throw Refusal(error: TransferError(.tooManyRedirects, "redirected in a cycle, back to \(next.absoluteString)"))
            }
            let status = response.status.code
            if status == 303 && hop.method != .HEAD || (status == 301 || status == 302) && hop.method == .POST {
                hop.method = .GET
                hop.withBody = false
            }
            hop.url = next
        }
    }

    /// A Location as the error shows it: at most 200 characters, no control characters.
    private static func quoted(_ location: String) -> String {
        let printable = String(location.unicodeScalars.map { $0.properties.generalCategory == .control ? "?" : Character($0) })
        return printable.count > 200 ? String(printable.prefix(200)) + "…" : printable
    }
}
