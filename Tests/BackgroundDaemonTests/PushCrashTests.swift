import AsyncHTTPClient
import Background
import BackgroundGateway
import BackgroundModel
import BackgroundTesting
import Crypto
import Foundation
import NIOSSL
import Testing

/// A push is delivered when the app's handler has answered it, not when a run was started for
/// it: bgd killed (-9) while the handler runs offers the push again after the restart, and the
/// app handles it once (D8).
@Suite(.timeLimit(.minutes(5)))
struct PushCrashTests {
    @Test func aPushWhoseWakeIsCutByACrashIsDeliveredAfterTheRestart() async throws {
        let directory = TemporaryDirectory.make()
        let state = directory + "/state"
        let socket = directory + "/bgd.sock"
        let port = try freeLoopbackPort()
        let arguments = ["--push-port", "\(port)", "--conditions", "unconstrained"]
        var daemon: DaemonProcess? = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, arguments: arguments)
        let admin = DaemonClient(socketPath: socket)
        let app = PushGatewayTests.app
        _ = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: app)!,
                launchCommand: LaunchCommand([try BuiltProducts.path(of: "bgd-fixture-app"), "hang-push-once"])!,
                fetchInterval: .never),
            as: RegisteredApp.self)
        let key = P256.Signing.PrivateKey()
        _ = try await admin.send(
            .post, "/v1/push/keys",
            body: ProviderKeyRegistration(
                keyID: PushGatewayTests.keyID, teamID: PushGatewayTests.teamID, topics: [app],
                publicKeyPEM: key.publicKey.pemRepresentation),
            as: ProviderKeyRegistration.self)
        let token = try await admin.send(.post, "/v1/apps/\(app)/push/token", as: DeviceTokenInfo.self).token
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.additionalTrustRoots = [.file(state + "/push-gateway.crt")]
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: .init(tlsConfiguration: tls))
        let provider = PushGatewayTests.Provider(
            client: client, base: "https://localhost:\(port)", key: key, now: SystemClock().now)
        let sent = try await provider.send(token: token, body: #"{"aps":{"content-available":1},"content-id":7}"#)
        #expect(sent.status == 200)
        try await client.shutdown()

        let log = state + "/containers/\(app)/fixture.log"
        func lines() -> [String] { PushGatewayTests.lines(ofFixtureLog: log) }
        #expect(await eventually { lines().contains("push-start 7") }, "the handler started")
        daemon?.signal(SIGKILL)
        _ = await daemon?.waitForExit()
        daemon = nil

        let next = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        var pushes: [PushRecord] = []
        for _ in 0..<2_000 {
            pushes = try await admin.send(.get, "/v1/apps/\(app)/pushes", as: [PushRecord].self)
            if pushes.first?.state == .delivered { break }
        }
        #expect(pushes.map(\.state) == [.delivered])
        #expect(pushes.first?.attempts == 2, "the run the crash cut short, and the one that delivered it")
        // bgctl push log says the push spent two wakes.
        let logged = try await Command.run(try BuiltProducts.path(of: "bgctl"), ["push", "log", app, "--socket", socket])
        let row = logged.standardOutput.split(separator: "\n").first { $0.contains("delivered") }.map(String.init) ?? ""
        #expect(logged.standardOutput.contains("TRIES") && row.contains(/delivered\s+2\s/), "\(logged.standardOutput)")
        #expect(
            lines().filter { $0.hasPrefix("push") } == ["push-start 7", "push 7"], "handled once after the restart")
        next.signal(SIGTERM)
        _ = await next.waitForExit()
    }
}
