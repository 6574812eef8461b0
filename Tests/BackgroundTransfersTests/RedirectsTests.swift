import AsyncHTTPClient
import BackgroundModel
import Foundation
import NIOHTTP1
import Testing

@testable import BackgroundTransfers

/// The engine's own redirect following (`Redirects`), over a scripted server: what is sent at
/// each hop and where a chain is refused. End to end, against a real origin and bgd:
/// TransferTests.redirectsAreFollowedUpToFive.
struct RedirectsTests {
    /// A server that answers each URL from `script` (a Location, or nil for a 200), and what was
    /// asked of it.
    final class Script: @unchecked Sendable {
        // @unchecked: used from one task at a time.
        let answers: [String: (UInt, String?)]
        var sent: [(url: String, method: HTTPMethod, hasBody: Bool)] = []
        init(_ answers: [String: (UInt, String?)]) { self.answers = answers }

        func follow(from url: String, method: HTTPMethod = .GET) async throws -> HTTPClientResponse {
            try await Redirects.follow(
                from: URL(string: url)!, method: method,
                request: { hop in
                    var request = HTTPClientRequest(url: hop.url.absoluteString)
                    request.method = hop.method
                    if hop.withBody { request.body = .bytes(Array("file".utf8)) }
                    return request
                },
                send: { request in
                    self.sent.append((request.url, request.method, request.body != nil))
                    guard let (status, location) = self.answers[request.url] else { return HTTPClientResponse(status: .ok) }
                    return HTTPClientResponse(
                        status: .init(statusCode: Int(status)), headers: location.map { ["Location": $0] } ?? [:])
                },
                drain: { _ in })
        }
    }

    func refusal(_ script: Script, from url: String) async -> TransferError? {
        do {
            _ = try await script.follow(from: url)
            return nil
        } catch let refusal as Redirects.Refusal {
            return refusal.error
        } catch {
            return nil
        }
    }

    @Test func aChainIsFollowedToItsAnswerWithRelativeLocations() async throws {
        let script = Script([
            "http://a.test/1": (301, "/2"), "http://a.test/2": (307, "https://b.test:8443/3"),
            "https://b.test:8443/3": (308, "4?x=1"),
        ])
        let answer = try await script.follow(from: "http://a.test/1")
        #expect(answer.status == .ok)
        #expect(script.sent.map(\.url) == ["http://a.test/1", "http://a.test/2", "https://b.test:8443/3", "https://b.test:8443/4?x=1"])
    }

    @Test func fiveRedirectsAreFollowedAndASixthIsRefused() async throws {
        var chain: [String: (UInt, String?)] = [:]
        for hop in 0..<6 { chain["http://a.test/\(hop)"] = (302, "/\(hop + 1)") }
        let five = Script(chain.filter { $0.key != "http://a.test/5" })
        #expect(try await five.follow(from: "http://a.test/0").status == .ok)
        #expect(five.sent.count == 6)
        let six = Script(chain)
        #expect(await refusal(six, from: "http://a.test/0")?.code == .tooManyRedirects)
        #expect(six.sent.count == 6, "the seventh URL is never asked for")
    }

    @Test func aCycleIsRefusedAtOnce() async throws {
        let script = Script(["http://a.test/1": (302, "/2"), "http://a.test/2": (302, "/1")])
        let error = await refusal(script, from: "http://a.test/1")
        #expect(error?.code == .tooManyRedirects && error?.message.contains("cycle") == true, "\(String(describing: error))")
        #expect(script.sent.count == 2)
    }

    /// The Locations that reached NIO unchecked (a port it traps on) and the ones no transfer may
    /// follow: refused before any connection, saying why.
    @Test(arguments: [
        ("http://127.0.0.1:99999/x", "a port is 1 to 65535"), ("http://h.test:0/", "a port is 1 to 65535"),
        ("ftp://h.test/f", "http or https"), ("file:///etc/passwd", "http or https"), ("http:///nohost", "http or https"),
        ("http://h.test:port/", "not a URL"),
    ])
    func anUnusableLocationIsRefusedBeforeAnyConnection(location: String, says: String) async throws {
        let script = Script(["http://a.test/1": (302, location)])
        let error = await refusal(script, from: "http://a.test/1")
        #expect(error?.code == .badURL && error?.message.contains(says) == true, "\(String(describing: error))")
        #expect(script.sent.map(\.url) == ["http://a.test/1"])
    }

    /// An upload answered 303 (or 301/302 to a POST) goes on as a GET without the file; 307 and
    /// 308 send the same method and the file again; a 3xx without a Location is the answer.
    @Test func theMethodChangesAsHTTPSays() async throws {
        let seeOther = Script(["http://a.test/up": (303, "/done")])
        _ = try await seeOther.follow(from: "http://a.test/up", method: .PUT)
        #expect(seeOther.sent.map(\.method) == [.PUT, .GET] && seeOther.sent.map(\.hasBody) == [true, false])
        let found = Script(["http://a.test/up": (302, "/done")])
        _ = try await found.follow(from: "http://a.test/up", method: .POST)
        #expect(found.sent.map(\.method) == [.POST, .GET] && found.sent.map(\.hasBody) == [true, false])
        let temporary = Script(["http://a.test/up": (307, "/again")])
        _ = try await temporary.follow(from: "http://a.test/up", method: .POST)
        #expect(temporary.sent.map(\.method) == [.POST, .POST] && temporary.sent.map(\.hasBody) == [true, true])
        let bare = Script(["http://a.test/up": (302, nil)])
        #expect(try await bare.follow(from: "http://a.test/up").status == .found)
        #expect(bare.sent.count == 1)
    }
}
