import AsyncHTTPClient
import BackgroundGateway
import BackgroundRelay
import BackgroundTesting
import Foundation
import Testing

/// The self-signed certificate bgd's gateway and bgrelay make: it names every name a client
/// reaches them by (a client checks it), and one made before without a name now asked for is
/// not replaced behind the clients that trust it.
@Suite(.timeLimit(.minutes(2)))
struct GatewayCertificateTests {
    @Test func aNewPairNamesWhereClientsReachIt() throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let asked = ["relay.example.net", "192.0.2.7", "[2001:db8::1]"]
        let paths = try GatewayCertificate.loadOrCreate(in: directory, names: asked, now: Date())
        let named = try GatewayCertificate.certifiedNames(inFile: paths.certificate)
        for name in [
            "localhost", "127.0.0.1", "::1", ProcessInfo.processInfo.hostName.lowercased(), "relay.example.net",
            "192.0.2.7", "2001:db8::1",
        ] {
            #expect(named.contains(name), "\(name) in \(named)")
        }
        // Asked again (a name's case does not matter): the same pair.
        let before = try Data(contentsOf: URL(fileURLWithPath: paths.certificate))
        _ = try GatewayCertificate.loadOrCreate(in: directory, names: ["RELAY.example.net"], now: Date())
        #expect(try Data(contentsOf: URL(fileURLWithPath: paths.certificate)) == before)
    }

    @Test func anOldPairWithoutAnAskedNameIsKeptAndSaysWhatToDo() throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let paths = try GatewayCertificate.loadOrCreate(in: directory, now: Date())
        let before = try Data(contentsOf: URL(fileURLWithPath: paths.certificate))
        #expect {
            try GatewayCertificate.loadOrCreate(in: directory, names: ["relay.example.net"], now: Date())
        } throws: { error in
            let description = "\(error)"
            return error is GatewayCertificate.MissingNames && description.contains("not relay.example.net")
                && description.contains("move it and its .key away")
        }
        #expect(try Data(contentsOf: URL(fileURLWithPath: paths.certificate)) == before)
    }

    /// An empty name is no name: asked for, it would be missing from every certificate made.
    @Test func anEmptyNameIsNoName() {
        var configuration = PushGatewayConfiguration(host: "0.0.0.0")
        configuration.certificateNames = ["", "relay.example.net"]
        #expect(configuration.namesToCertify == ["relay.example.net"])
        configuration.host = "192.0.2.7"
        #expect(configuration.namesToCertify == ["relay.example.net", "192.0.2.7"])
    }

    /// bgd enrolled with `https://127.0.0.1:2198` (not `localhost`) trusts the relay's own
    /// certificate: the address is in it.
    @Test func theRelayIsReachedByItsLoopbackAddress() async throws {
        try await RelayNode.with { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            for host in ["127.0.0.1", "localhost"] {
                let response = try await client.execute(
                    HTTPClientRequest(url: "https://\(host):\(node.uplinkPort)/metrics"), timeout: .seconds(10))
                #expect(response.status == .ok, "\(host)")
            }
        }
    }

    /// bgrelay asked for a name its existing certificate lacks refuses to start, and says so.
    @Test func bgrelayRefusesACertificateWithoutItsName() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        _ = try GatewayCertificate.loadOrCreate(in: directory, now: Date())
        let output = try await Command.run(
            try BuiltProducts.path(of: "bgrelay"),
            [
                "--state-dir", directory, "--port", "0", "--uplink-port", "0", "--certificate-name",
                "relay.example.net",
            ])
        #expect(output.status == 78, "\(output.standardError)")
        #expect(output.standardError.contains("but not relay.example.net"), "\(output.standardError)")

        let files = try await Command.run(
            try BuiltProducts.path(of: "bgrelay"),
            [
                "--state-dir", directory, "--port", "0", "--uplink-port", "0", "--certificate", "/etc/hostname",
                "--key", "/etc/hostname",
            ])
        #expect(files.status == 78, "\(files.standardError)")
        #expect(files.standardError.contains("cannot use the TLS certificate /etc/hostname"), "\(files.standardError)")
    }

    /// bgd's push gateway the same: exit 78 (a configuration to fix), the reason on one line —
    /// and it stops: bgd used to wait for ever for the gateway's port, deaf to SIGTERM.
    @Test(.timeLimit(.minutes(1))) func bgdRefusesACertificateWithoutItsName() async throws {
        let directory = TemporaryDirectory.make()
        _ = try GatewayCertificate.loadOrCreate(in: directory + "/state", now: Date())
        let output = try await Command.run(
            try BuiltProducts.path(of: "bgd"),
            [
                "--state-dir", directory + "/state", "--socket", directory + "/bgd.sock", "--push-port", "0",
                "--push-certificate-name", "device.example.net",
            ])
        #expect(output.status == 78, "\(output.standardError)")
        #expect(output.standardError.contains("but not device.example.net"), "\(output.standardError)")
        #expect(!output.standardError.contains("is ready"), "\(output.standardError)")

        // Pairs given as files that TLS cannot use: no PEM; two good pairs crossed (the key is
        // not the certificate's); a file that is not there. Refused, and bgd stops.
        let one = try GatewayCertificate.loadOrCreate(in: directory + "/one", now: Date())
        let other = try GatewayCertificate.loadOrCreate(in: directory + "/other", now: Date())
        for (pair, reason) in [
            (("/etc/hostname", "/etc/hostname"), "cannot use the TLS certificate /etc/hostname"),
            ((one.certificate, other.key), "cannot use the TLS certificate \(one.certificate) with the key \(other.key)"),
            ((one.certificate, directory + "/missing.key"), "cannot read \(directory)/missing.key"),
        ] {
            let refused = try await Command.run(
                try BuiltProducts.path(of: "bgd"),
                [
                    "--state-dir", directory + "/files", "--socket", directory + "/files.sock", "--push-port", "0",
                    "--push-certificate", pair.0, "--push-key", pair.1,
                ])
            #expect(refused.status == 78 && refused.standardError.contains(reason), "\(refused.standardError)")
            #expect(!refused.standardError.contains("is ready"), "\(refused.standardError)")
            // `bgd --check` (what install-service runs) refuses the same pair the same way.
            let checked = try await Command.run(
                try BuiltProducts.path(of: "bgd"), ["--check", "--push-certificate", pair.0, "--push-key", pair.1])
            #expect(checked.status == 78 && checked.standardError.contains(reason), "\(checked.standardError)")
        }

        // bgd's own pair, damaged on disk: said as such, with what to do, not as ASN.1 (exit 1).
        try "junk\n".write(toFile: directory + "/state/push-gateway.crt", atomically: true, encoding: .utf8)
        let damaged = try await Command.bgd(onStateIn: directory)
        #expect(damaged.status == 78, "\(damaged.standardError)")
        #expect(
            damaged.standardError.contains("cannot read the gateway's own certificate \(directory)/state/push-gateway.crt")
                && damaged.standardError.contains("a new pair is made at the next start"), "\(damaged.standardError)")
    }
}
