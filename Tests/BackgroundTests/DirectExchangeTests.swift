import Foundation
import Testing

@testable import Background

#if canImport(Glibc)
    import Glibc
#endif

/// bgctl's requests without an event loop (`DaemonClient.Transport.direct`): answers read whole
/// whichever way their length is told, and anything else refused with a sentence. Every bgctl
/// test goes through it against a real bgd; these are the answers bgd does not give.
struct DirectExchangeTests {
    static func answer(_ text: String, ended: Bool = true) throws -> DirectExchange.Answer? {
        try DirectExchange.parse(Data(text.utf8), ended: ended)
    }

    @Test func anAnswerIsWholeByLengthByChunksOrByTheEnd() throws {
        #expect(try Self.answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]") == .init(status: 200, body: Data("[]".utf8)))
        #expect(try Self.answer("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n[]", ended: false) == nil, "two to come")
        let chunked = "HTTP/1.1 404 Not Found\r\ntransfer-encoding: chunked\r\n\r\n3;x=y\r\n{\"a\r\n2\r\n\":\r\n3\r\n1}\n\r\n0\r\n\r\n"
        #expect(try Self.answer(chunked) == .init(status: 404, body: Data("{\"a\":1}\n".utf8)))
        #expect(try Self.answer(String(chunked.dropLast(7)), ended: false) == nil, "the last chunk has not come")
        #expect(try Self.answer("HTTP/1.1 204 No Content\r\n\r\n") == .init(status: 204, body: Data()))
        #expect(try Self.answer("HTTP/1.1 200 OK\r\n\r\nuntil the end", ended: false) == nil)
        #expect(try Self.answer("HTTP/1.0 200 OK\r\n\r\nuntil the end") == .init(status: 200, body: Data("until the end".utf8)))
    }

    @Test func aBrokenAnswerIsRefusedWithASentence() {
        for broken in [
            "SSH-2.0-OpenSSH_9.2\r\n\r\n", "HTTP/1.1 999 What\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            "HTTP/1.1 200 OK\r\nContent-Length: 99999999999\r\n\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab",
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
            "HTTP/1.1 200 OK\r\nContent-Le",
        ] {
            #expect(throws: DirectExchange.Failure.self, "\(broken)") { try Self.answer(broken) }
        }
    }

    /// Against a socket that answers as bgd would not (chunked, in pieces): the request goes out
    /// as written, with the token, and the answer is read whole. A path with a space is refused
    /// before anything is sent; no socket at all says so.
    @Test func aRequestGoesOutAndItsAnswerComesBack() async throws {
        let directory = FileManager.default.temporaryDirectory.path + "/direct-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/bgd.sock"
        let listener = try Self.listening(at: path)
        defer { close(listener) }
        // A thread of its own: the exchange blocks the test's, and the test pool may have no
        // other free (a blocking server task waited behind it for the whole timeout).
        let (received, heard) = AsyncStream<String>.makeStream(bufferingPolicy: .unbounded)
        Thread.detachNewThread {
            heard.yield(serve())
            heard.finish()
        }
        @Sendable func serve() -> String {
            let connection = accept(listener, nil, nil)
            defer { close(connection) }
            var request = Data()
            var buffer = [UInt8](repeating: 0, count: 4096)
            while !String(decoding: request, as: UTF8.self).hasSuffix("{}") {
                let count = read(connection, &buffer, buffer.count)
                if count <= 0 { break }
                request.append(contentsOf: buffer[0..<count])
            }
            for piece in ["HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n", "2\r\nok\r\n", "0\r\n\r\n"] {
                _ = piece.withCString { write(connection, $0, strlen($0)) }
            }
            return String(decoding: request, as: UTF8.self)
        }
        let answer = try DirectExchange.send(
            socketPath: path, method: "POST", path: "/v1/apps?x=1", headers: [("Authorization", "Bearer t")],
            body: Data("{}".utf8), timeout: .seconds(30))
        #expect(answer == .init(status: 201, body: Data("ok".utf8)))
        var requests = received.makeAsyncIterator()
        let request = await requests.next() ?? ""
        #expect(request.hasPrefix("POST /v1/apps?x=1 HTTP/1.1\r\n"), "\(request)")
        #expect(request.contains("Authorization: Bearer t\r\n") && request.contains("Content-Length: 2\r\n\r\n{}"))

        #expect(throws: DirectExchange.Failure.self) {
            try DirectExchange.send(
                socketPath: path, method: "GET", path: "/v1/apps/a b", headers: [], body: nil, timeout: .seconds(1))
        }
        #expect(throws: DirectExchange.Failure(reason: "No such file or directory")) {
            try DirectExchange.send(
                socketPath: directory + "/none.sock", method: "GET", path: "/v1/apps", headers: [], body: nil,
                timeout: .seconds(1))
        }
    }

    static func listening(at path: String) throws -> Int32 {
        let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = try #require(SocketProbe.address(of: path))
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        try #require(bound == 0 && Glibc.listen(descriptor, 4) == 0)
        return descriptor
    }
}
