import BackgroundDaemon
import BackgroundGateway
import BackgroundTesting
import Foundation
import Testing

/// Plaintext is for development on one machine: HTTP/2 with prior knowledge or HTTP/1.1, on
/// loopback only (curl as the client, as a developer would use it).
@Suite(.timeLimit(.minutes(5)))
struct PushPlaintextTests {
    /// curl's HTTP version and status for an unauthenticated push, and the body.
    func post(_ arguments: [String], port: Int) async throws -> (version: String, body: String) {
        let output = try await Command.run(
            "/usr/bin/env",
            ["curl", "-s", "-X", "POST", "-d", "{}", "-w", "\n%{http_version} %{http_code}"] + arguments + [
                "http://127.0.0.1:\(port)/3/device/\(String(repeating: "a", count: 64))"
            ])
        let lines = output.standardOutput.split(separator: "\n").map(String.init)
        return (lines.last ?? "", lines.dropLast().joined())
    }

    @Test func http2WithPriorKnowledgeOnLoopback() async throws {
        try await TestDaemon.with(push: .init(port: 0, security: .plaintext)) { daemon in
            let port = try #require(await daemon.daemon.pushGateway?.boundPort.wait())
            let answer = try await post(["--http2-prior-knowledge"], port: port)
            #expect(answer.version == "2 403" && answer.body.contains("MissingProviderToken"), "\(answer)")
        }
    }

    @Test func http1OnLoopback() async throws {
        try await TestDaemon.with(push: .init(port: 0, security: .plaintextHTTP1)) { daemon in
            let port = try #require(await daemon.daemon.pushGateway?.boundPort.wait())
            let answer = try await post([], port: port)
            #expect(answer.version == "1.1 403" && answer.body.contains("MissingProviderToken"), "\(answer)")
        }
    }

    /// bgd refuses to start a plaintext gateway on an address other machines can reach.
    @Test func plaintextOffLoopbackIsRefused() async throws {
        let directory = TemporaryDirectory.make()
        for flag in ["--push-plaintext", "--push-http1"] {
            let output = try await Command.run(
                try BuiltProducts.path(of: "bgd"),
                [
                    flag, "--push-host", "0.0.0.0", "--state-dir", directory + "/state", "--socket",
                    directory + "/bgd.sock",
                ])
            #expect(output.status != 0 && output.standardError.contains("only on loopback"), "\(output.standardError)")
            #expect(!FileManager.default.fileExists(atPath: directory + "/state/bgd.sqlite"))
        }
    }
}
