import Background
import BackgroundModel
import BackgroundRelay
import BackgroundTesting
import Crypto
import Foundation
import Logging
import Testing

/// A device behind a one-way network, as a laptop behind NAT is: bgd in a network namespace of
/// its own, joined to the host by a veth pair, reachable from nowhere, reaching the relay on the
/// host side. The link then goes down for a few seconds with pushes arriving at the relay, and
/// comes back; then for minutes: every push accepted reaches bgd, once, and promptly.
@Suite(
    .timeLimit(.minutes(5)),
    .enabled(
        if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip")
            && FileManager.default.isExecutableFile(atPath: "/usr/sbin/iptables"),
        "needs root, ip(8) and iptables(8) for network namespaces (CI installs them)"))
struct PushRelayNetworkTests {
    static let app = PushGatewayTests.app
    /// Long enough for bgd's doubling backoff to pass a minute (1 + 2 + … + 64 s).
    static let longOutage: TimeInterval = 150

    @discardableResult
    func ip(_ arguments: String...) async throws -> Command.Output {
        let output = try await Command.run("/usr/sbin/ip", arguments)
        guard output.status == 0 else { throw NetworkSetupFailed(description: "ip \(arguments.joined(separator: " ")): \(output.standardError)") }
        return output
    }

    struct NetworkSetupFailed: Error, CustomStringConvertible { let description: String }

    @Test func aDeviceBehindAOneWayNetworkGetsItsPushesAcrossAnOutage() async throws {
        let tag = String(UInt32.random(in: 0..<0xFFFFFF), radix: 16)
        let (namespace, hostSide, deviceSide) = ("bgr\(tag)", "vh\(tag)", "vd\(tag)")
        let subnet = "10.213.\(Int.random(in: 1...250))"
        let (relayAddress, deviceAddress) = ("\(subnet).1", "\(subnet).2")
        try await ip("netns", "add", namespace)
        defer { _ = Task { try? await ip("netns", "del", namespace) } }
        try await ip("link", "add", hostSide, "type", "veth", "peer", "name", deviceSide)
        try await ip("link", "set", deviceSide, "netns", namespace)
        try await ip("address", "add", "\(relayAddress)/24", "dev", hostSide)
        try await ip("link", "set", hostSide, "up")
        try await ip("netns", "exec", namespace, "ip", "address", "add", "\(deviceAddress)/24", "dev", deviceSide)
        try await ip("netns", "exec", namespace, "ip", "link", "set", deviceSide, "up")
        try await ip("netns", "exec", namespace, "ip", "link", "set", "lo", "up")
        // One way: connections out (and their answers) pass; none is opened from outside.
        try await ip("netns", "exec", namespace, "iptables", "-A", "INPUT", "-m", "conntrack", "--ctstate", "NEW", "-j", "DROP")

        // The relay on the host side, with a certificate for its address.
        let directory = TemporaryDirectory.make()
        let (certificate, key) = (directory + "/relay.crt", directory + "/relay.key")
        let made = try await Command.run(
            "/usr/bin/openssl",
            [
                "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-subj",
                "/CN=relay", "-addext", "subjectAltName=IP:\(relayAddress)", "-days", "2", "-keyout", key, "-out",
                certificate,
            ])
        #expect(made.status == 0, "\(made.standardError)")
        let relay = try await RelayProcess(
            stateDirectory: directory + "/relay",
            arguments: ["--host", relayAddress, "--certificate", certificate, "--key", key])
        let providerKey = P256.Signing.PrivateKey()
        let store = try SQLiteRelayStore.open(atPath: relay.stateDirectory + "/relay.sqlite")
        try await store.addTestProviderKey(providerKey, topics: [Self.app])

        // bgd inside the namespace: it reaches out; nothing reaches in.
        let daemon = try await DaemonProcess(
            stateDirectory: directory + "/bgd", socketPath: directory + "/bgd.sock",
            arguments: [
                "--push-relay", "https://\(relayAddress):\(relay.uplinkPort)", "--push-relay-ca", certificate,
                "--push-relay-keep-alive", "2s", "--push-host", "0.0.0.0",
            ],
            launcher: ["/usr/sbin/ip", "netns", "exec", namespace])
        let api = DaemonClient(socketPath: daemon.socketPath)
        let token = try await daemon.registerForPushes(Self.app, command: ["/bin/true"])
        #expect(await eventuallyAsync { (try? await store.tokenOwner(token)) != nil }, "bgd's token never reached the relay")

        let relayClient = RelayNode.client(trusting: certificate)
        defer { _ = relayClient.shutdown() }
        let provider = PushGatewayTests.Provider(
            client: relayClient, base: "https://\(relayAddress):\(relay.providerPort)", key: providerKey,
            now: SystemClock().now)
        var accepted: [String] = []
        func send(_ count: Int) async throws {
            for _ in 0..<count {
                let id = UUID().uuidString.lowercased()
                if try await provider.send(token: token, headers: [("apns-id", id)]).status == 200 { accepted.append(id) }
            }
        }
        func reachedBGD() async -> [String] {
            (try? await api.send(.get, "/v1/apps/\(Self.app)/pushes?limit=1000", as: [PushRecord].self).map(\.apnsID)) ?? []
        }

        try await send(3)
        #expect(await eventuallyAsync { await Set(reachedBGD()) == Set(accepted) })
        // A provider cannot open a connection to the device at all: bgd's own gateway listens on
        // every address in the namespace, and still nothing from outside gets there.
        let direct = try await Command.run(
            "/usr/bin/curl", ["-s", "--connect-timeout", "2", "-k", "https://\(deviceAddress):2197/"])
        #expect(direct.status != 0, "the device was reachable from the host")

        // The device's link goes down; pushes arrive at the relay meanwhile, and wait there.
        try await ip("link", "set", hostSide, "down")
        try await send(5)
        try await SystemClock().sleep(until: SystemClock().now.addingTimeInterval(6))  // the outage lasts
        #expect(try await store.pushCounts()[.pending] == 5)
        try await ip("link", "set", hostSide, "up")
        #expect(await eventuallyAsync { (try? await store.pushCounts()[.pending]) == nil }, "the pushes never left the relay")
        let reached = await reachedBGD()
        #expect(Set(reached) == Set(accepted) && reached.count == accepted.count, "accepted \(accepted), in bgd \(reached)")
        let status = try await api.send(.get, "/v1/push/relay", as: PushRelayStatus.self)
        #expect(status.state == .connected, "\(status)")

        // An outage of minutes: bgd's retries back off to a minute and more meanwhile. When the
        // link comes back the kernel says so, and bgd connects at once rather than at its next
        // retry, which could be two minutes away.
        try await ip("link", "set", hostSide, "down")
        let down = SystemClock().now
        try await send(4)
        try await SystemClock().sleep(until: down.addingTimeInterval(Self.longOutage))  // the outage lasts
        let during = try await api.send(.get, "/v1/push/relay", as: PushRelayStatus.self)
        #expect(during.state != .connected, "bgd did not notice the outage: \(during)")
        #expect(try await store.pushCounts()[.pending] == 4)
        try await ip("link", "set", hostSide, "up")
        let up = SystemClock().now
        let arrived = await eventuallyAsync { (try? await store.pushCounts()[.pending]) == nil }
        let took = SystemClock().now.timeIntervalSince(up)
        let retryWasDue = during.retryAt.map { String(format: "%.0f s", $0.timeIntervalSince(up)) } ?? "?"
        #expect(arrived && took < 20, "after the link came back the pushes took \(took) s (bgd's next retry was due in \(retryWasDue))")
        print(
            "PushRelayNetworkTests: \(Int(Self.longOutage)) s outage; pushes in bgd \(String(format: "%.1f", took)) s after the link came back (bgd's next retry was due in \(retryWasDue))"
        )
        let afterLong = await reachedBGD()
        #expect(Set(afterLong) == Set(accepted) && afterLong.count == accepted.count, "accepted \(accepted), in bgd \(afterLong)")
        daemon.signal(SIGTERM)
        _ = await daemon.waitForExit()
    }
}
