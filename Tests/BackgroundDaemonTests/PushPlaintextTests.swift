import BackgroundDaemon
import BackgroundGateway
import BackgroundModel
import BackgroundTesting
import Crypto
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

    /// The provider is authenticated before a byte of the body is read: a peer without a valid
    /// token that announces a body and never sends it is answered at once. Before, the gateway
    /// waited for the body (held, with its stream, for as long as the peer liked) and only then
    /// looked at the token. The wait is bounded (20 s) only so that the test fails rather than hangs.
    @Test func aBodyIsNotWaitedForBeforeTheProviderIsKnown() async throws {
        try await TestDaemon.with(push: .init(port: 0, security: .plaintextHTTP1)) { daemon in
            let port = try #require(await daemon.daemon.pushGateway?.boundPort.wait())
            let device = String(repeating: "a", count: 64)
            let answer = try await Command.run(
                "/bin/bash",
                [
                    "-c",
                    #"exec 3<>/dev/tcp/127.0.0.1/$1; printf 'POST /3/device/%s HTTP/1.1\r\nHost: gateway\r\nAuthorization: bearer forged\r\nContent-Length: 4000\r\n\r\n{' "$2" >&3; timeout 20 head -c 12 <&3"#,
                    "bash", "\(port)", device,
                ])
            #expect(answer.standardOutput == "HTTP/1.1 403", "\(answer)")
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

    /// `bgctl push send` to a plaintext gateway: HTTP/2 with prior knowledge to `--push-plaintext`,
    /// HTTP/1.1 to `--push-http1` (whose answer to HTTP/2's preface delivers nothing), one push each.
    @Test(arguments: [true, false])
    func bgctlPushSendSpeaksEitherPlaintextGateway(http2: Bool) async throws {
        let security: PushGatewayConfiguration.Security = http2 ? .plaintext : .plaintextHTTP1
        // bgctl signs with the real time, so bgd's virtual clock starts there.
        try await TestDaemon.with(clock: ManualClock(now: SystemClock().now), push: .init(port: 0, security: security))
        {
            daemon in
            let app = PushGatewayTests.app
            _ = try await daemon.register(app, command: ["/bin/true"], interval: .never)
            let key = P256.Signing.PrivateKey()
            _ = try await daemon.admin.send(
                .post, "/v1/push/keys",
                body: ProviderKeyRegistration(
                    keyID: PushGatewayTests.keyID, teamID: PushGatewayTests.teamID, topics: [app],
                    publicKeyPEM: key.publicKey.pemRepresentation),
                as: ProviderKeyRegistration.self)
            _ = try await daemon.admin.send(.post, "/v1/apps/\(app)/push/token", as: DeviceTokenInfo.self)
            let keyFile = daemon.directory + "/AuthKey.p8"
            try key.pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
            let payload = daemon.directory + "/payload.json"
            try #"{"aps":{"content-available":1}}"#.write(toFile: payload, atomically: true, encoding: .utf8)
            func send(_ extra: [String] = []) async throws -> Command.Output {
                PushGatewayTests.keepUpWithRealTime(daemon.clock)
                return try await Command.run(
                    try BuiltProducts.path(of: "bgctl"),
                    [
                        "push", "send", app, payload, "--key", keyFile, "--key-id", PushGatewayTests.keyID,
                        "--team-id", PushGatewayTests.teamID, "--socket", daemon.socketPath,
                    ] + extra,
                    environment: ProcessInfo.processInfo.environment.merging([
                        "XDG_CACHE_HOME": daemon.directory + "/cache"
                    ]) { $1 })
            }
            let sent = try await send()
            let version = http2 ? "HTTP/2.0" : "HTTP/1.1"
            #expect(
                sent.status == 0 && sent.standardOutput.contains("200 accepted over \(version)"),
                "\(sent.standardOutput) \(sent.standardError)")
            #expect(
                try await daemon.store.pushes(of: AppID(rawValue: app)!).count == 1, "one push, however it was sent")
            // A refusal comes back the same way: its status and reason.
            let refused = try await send(["--priority", "10"])
            #expect(refused.status == 65 && refused.standardError.contains("BadPriority"), "\(refused.standardError)")
            // Nothing listening, and a listener that never answers: said in words.
            let closed = try await send(["--gateway", "http://127.0.0.1:1"])
            #expect(
                closed.status == 69
                    && closed.standardError.contains("cannot connect to http://127.0.0.1:1: connection refused"),
                "\(closed.standardError)")
            let silent = try UnservedLoopbackPort()
            defer { silent.close() }
            let unanswered = try await send(["--gateway", "http://127.0.0.1:\(silent.port)", "--timeout", "1s"])
            #expect(
                unanswered.status == 69
                    && unanswered.standardError.contains(
                        "no answer from http://127.0.0.1:\(silent.port) within --timeout"),
                "\(unanswered.standardError)")
            #expect(try await daemon.store.pushes(of: AppID(rawValue: app)!).count == 1)
        }
    }
}
