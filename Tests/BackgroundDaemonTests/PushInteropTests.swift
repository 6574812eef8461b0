import BackgroundGateway
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// A provider written with an off-the-shelf APNs client library — aioapns, from PyPI — pointed
/// at bgd's gateway with only the host, the port and the trusted certificate changed, wakes the
/// app and hears APNs' reasons. (It found that bgd must speak HTTP/2 over TLS without ALPN and
/// end each stream on its last frame, as APNs does.)
@Suite(.timeLimit(.minutes(5)))
struct PushInteropTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path
    static let python = root + "/.build/interop/venv/bin/python"

    @Test(
        .enabled(
            if: FileManager.default.isExecutableFile(atPath: python),
            "needs the aioapns venv: run Tests/Interop/setup.sh (CI does)"))
    func anOffTheShelfAPNsClientWakesTheApp() async throws {
        let gatewayTests = PushGatewayTests()
        // The library signs with the real time, so bgd's virtual clock starts there.
        try await gatewayTests.withGateway(command: try gatewayTests.fixture(), now: SystemClock().now) {
            provider, daemon, tokenOf in
            let token = try await tokenOf(PushGatewayTests.app)
            let keyFile = daemon.directory + "/AuthKey.p8"
            try provider.key.pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
            let port = try #require(daemon.daemon.pushGateway?.boundPort.port)
            let certificate = try #require(daemon.daemon.pushGateway?.certificatePath)
            var output: Command.Output?
            let run = try await daemon.waitForRunEnd(of: PushGatewayTests.app) {
                output = try await Command.run(
                    Self.python,
                    [
                        Self.root + "/Tests/Interop/aioapns_provider.py", "localhost", String(port), certificate,
                        keyFile, PushGatewayTests.keyID,
                        PushGatewayTests.teamID, PushGatewayTests.app, token, "5",
                    ])
            }
            let lines = output?.standardOutput.split(separator: "\n").map(String.init) ?? []
            #expect(output?.status == 0, "\(output?.standardError ?? "")")
            #expect(
                lines == ["background ok", "priority10 BadPriority", "unknownToken BadDeviceToken"],
                "\(lines); the library said: \(output?.standardError ?? "")")
            #expect(run.trigger == .remoteNotification && run.outcome == .newData, "\(run)")
            #expect(gatewayTests.log(daemon) == ["push 5"])
        }
    }
}
