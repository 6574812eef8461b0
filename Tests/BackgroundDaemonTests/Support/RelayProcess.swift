import Background
import BackgroundModel
import BackgroundRelay
import BackgroundTesting
import Crypto
import Foundation

/// A `bgrelay` process on loopback, for tests of the real binaries.
final class RelayProcess: Sendable {
    let process: Spawned
    let output: OutputWatcher
    let stateDirectory: String
    let providerPort: Int
    let uplinkPort: Int

    var uplinkURL: String { "https://localhost:\(uplinkPort)" }
    var certificatePath: String { stateDirectory + "/push-gateway.crt" }

    enum Failure: Error { case didNotStart(String) }

    /// `ports` (provider, uplink): a node restarted where its providers and devices know it. By
    /// default two free ones outside the ephemeral range (`freeLoopbackPort`), so that a test can
    /// kill the node and start it again on them; chosen again if another test took one first.
    convenience init(stateDirectory: String, arguments: [String] = [], environment: [String: String] = [:]) async throws {
        var attempt = 0
        while true {
            do {
                try await self.init(
                    stateDirectory: stateDirectory, arguments: arguments,
                    ports: (try freeLoopbackPort(), try freeLoopbackPort()), environment: environment)
                return
            } catch Failure.didNotStart(let output) where output.contains("already in use") && attempt < 5 {
                attempt += 1
            }
        }
    }

    init(
        stateDirectory: String, arguments: [String] = [], ports: (Int, Int), environment: [String: String] = [:]
    ) async throws {
        self.stateDirectory = stateDirectory
        process = try Spawned(
            try BuiltProducts.path(of: "bgrelay"),
            ["--state-dir", stateDirectory, "--port", String(ports.0), "--uplink-port", String(ports.1)] + arguments,
            environment: ProcessInfo.processInfo.environment.merging(environment) { $1 }, mergeErrors: true)
        output = OutputWatcher(process.output)
        guard await output.wait(for: "bgrelay: providers on"),
            let line = output.text.split(separator: "\n").first(where: { $0.hasPrefix("bgrelay: providers on") })
        else {
            process.signal(SIGKILL)
            throw Failure.didNotStart(output.text)
        }
        // "bgrelay: providers on 127.0.0.1:P, devices on 127.0.0.1:U"
        let ports = line.split(separator: ",").compactMap { $0.split(separator: ":").last.flatMap { Int($0) } }
        guard ports.count == 2 else { throw Failure.didNotStart(String(line)) }
        providerPort = ports[0]
        uplinkPort = ports[1]
    }

    deinit { process.signal(SIGKILL) }
}

extension DaemonProcess {
    /// Registers `app` (launched with `command`) with this bgd and asks for its device token, as
    /// `registerForRemoteNotifications` would.
    func registerForPushes(_ app: String, command: [String] = ["/bin/true"]) async throws -> String {
        let api = DaemonClient(socketPath: socketPath)
        _ = try await api.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: app)!, launchCommand: LaunchCommand(command)!, fetchInterval: .never,
                taskIdentifiers: nil),
            as: RegisteredApp.self)
        return try await api.send(.post, "/v1/apps/\(app)/push/token", as: DeviceTokenInfo.self).token
    }
}

extension RelayStore {
    /// Registers a provider key for `topics` under the tests' key and team ids.
    func addTestProviderKey(_ key: P256.Signing.PrivateKey, topics: [String]) async throws {
        try await addProviderKey(
            ProviderKeyRegistration(
                keyID: PushGatewayTests.keyID, teamID: PushGatewayTests.teamID, topics: topics,
                publicKeyPEM: key.publicKey.pemRepresentation), now: SystemClock().now)
    }
}
