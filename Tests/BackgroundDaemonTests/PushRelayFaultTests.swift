import AsyncHTTPClient
import Background
import BackgroundModel
import BackgroundRelay
import BackgroundTesting
import Crypto
import Foundation
import Logging
import NIOSSL
import Testing

/// Faults against the real binaries: three `bgrelay` processes on one PostgreSQL, a `bgd`
/// process that knows all three, a provider posting to whichever node is up. A node is killed
/// with pushes in flight; the node the device moved to is then SIGSTOPped (the device finds the
/// connection silent and moves again) and continued after the device is gone from it — it must
/// deliver nothing. A checker reads every push the provider got a 200 for, what the relay says
/// became of it, and what reached bgd: none lost, none twice.
@Suite(
    .timeLimit(.minutes(3)),
    .enabled(if: TestPostgres.isAvailable, "needs PostgreSQL: eval \"$(Tests/Postgres/start.sh)\" (CI does)"))
struct PushRelayFaultTests {
    static let app = PushGatewayTests.app

    @Test func noPushIsLostOrDuplicatedWhenNodesDieOrStall() async throws {
        let directory = TemporaryDirectory.make()
        let database = try await TestPostgres.makeDatabase()
        var nodes: [RelayProcess] = []
        for index in 0..<3 {
            let state = directory + "/relay\(index)"
            if index > 0 {  // one certificate for the relay, whichever node answers
                try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
                for file in ["push-gateway.crt", "push-gateway.key"] {
                    try FileManager.default.copyItem(atPath: nodes[0].stateDirectory + "/" + file, toPath: state + "/" + file)
                }
            }
            nodes.append(
                try await RelayProcess(stateDirectory: state, arguments: ["--database", database, "--node", "node\(index)"]))
        }
        let store = try PostgresRelayStore(url: database, logger: Logger(label: "checker"))
        let pool = Task { await store.runPool() }
        defer { pool.cancel() }
        let key = P256.Signing.PrivateKey()
        try await store.addTestProviderKey(key, topics: [Self.app])

        let daemon = try await DaemonProcess(
            stateDirectory: directory + "/bgd", socketPath: directory + "/bgd.sock",
            arguments: [
                "--push-relay", nodes.map(\.uplinkURL).joined(separator: ","), "--push-relay-ca",
                nodes[0].certificatePath, "--push-relay-keep-alive", "2s",
            ])
        let api = DaemonClient(socketPath: daemon.socketPath)
        let token = try await daemon.registerForPushes(Self.app, command: ["/bin/true"])
        #expect(await eventuallyAsync { (try? await store.tokenOwner(token)) != nil })
        let device = try #require(try await store.tokenOwner(token)?.device)

        var tls = TLSConfiguration.makeClientConfiguration()
        tls.additionalTrustRoots = [.file(nodes[0].certificatePath)]
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.connectionPool.retryConnectionEstablishment = false
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        defer { _ = client.shutdown() }
        var accepted: [String] = []
        var sent = 0
        let issuedAt = SystemClock().now  // one provider token throughout, as APNs wants
        /// Sends `count` pushes, round robin over `to`; keeps the apns-ids answered 200.
        func send(_ count: Int, to: [Int]) async throws {
            for i in 0..<count {
                sent += 1
                let id = String(format: "00000000-0000-4000-8000-%012d", sent)
                let provider = PushGatewayTests.Provider(
                    client: client, base: "https://localhost:\(nodes[to[i % to.count]].providerPort)", key: key,
                    now: issuedAt)
                if let answer = try? await provider.send(token: token, headers: [("apns-id", id)]), answer.status == 200 {
                    accepted.append(id)
                }
            }
        }
        func allDelivered() async -> Bool {
            await eventuallyAsync { (try? await store.pushCounts()[.pending]) == nil }
        }
        func holder() async throws -> Int {
            let name = try #require(try await store.claimHolder(of: device))
            return try #require(Int(name.dropFirst(4)))
        }

        try await send(9, to: [0, 1, 2])
        #expect(await allDelivered(), "round 1")

        // kill -9 of the node holding the device, with pushes in flight to it and the others.
        let killed = try await holder()
        let survivors = [0, 1, 2].filter { $0 != killed }
        try await send(3, to: [killed])
        nodes[killed].process.signal(SIGKILL)
        try await send(9, to: survivors)
        #expect(await allDelivered(), "after kill -9 of node \(killed)")
        let moved = try await holder()
        #expect(moved != killed)

        // SIGSTOP of the node the device moved to: the uplink goes silent; bgd finds it out at
        // its next keep-alive and reconnects to the last node standing.
        nodes[moved].process.signal(SIGSTOP)
        let last = survivors.first { $0 != moved }!
        try await send(9, to: [last])
        #expect(await allDelivered(), "after SIGSTOP of node \(moved)")
        #expect(try await holder() == last)
        // Continued: the stalled node's session is superseded and sends nothing more.
        nodes[moved].process.signal(SIGCONT)
        try await send(3, to: [moved, last])
        #expect(await allDelivered(), "after SIGCONT of node \(moved)")

        // The checker.
        let relayLog = try await store.pushLog()
        let reached = try await api.send(.get, "/v1/apps/\(Self.app)/pushes?limit=1000", as: [PushRecord].self)
            .map(\.apnsID)
        let counts = Dictionary(reached.map { ($0, 1) }, uniquingKeysWith: +)
        let lost = accepted.filter { counts[$0] == nil }
        let duplicated = counts.filter { $0.value > 1 }.map(\.key)
        let ended = relayLog.filter { $0.state != .delivered }
        let report =
            "accepted \(accepted.count) of \(sent), delivered once \(accepted.count - lost.count), ended with a reason \(ended.count), lost \(lost.count), duplicated \(duplicated.count)"
        #expect(lost.isEmpty && duplicated.isEmpty, "\(report): lost \(lost), duplicated \(duplicated)")
        #expect(Set(relayLog.map(\.apnsID)) == Set(accepted), "the relay stored exactly what it answered 200 to")
        #expect(accepted.count >= sent - 3, "\(report)")  // only pushes to the killed node may fail
        print("PushRelayFaultTests: \(report)")
        daemon.signal(SIGTERM)
        _ = await daemon.waitForExit()
    }
}
