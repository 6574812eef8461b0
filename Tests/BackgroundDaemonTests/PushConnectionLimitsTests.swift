import BackgroundGateway
import BackgroundTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The push port is open to the network: connections that never start TLS are closed after the
/// handshake timeout, one peer cannot hold more than its share, and a stop does not wait for
/// ever on a silent connection (probe S3).
@Suite(.timeLimit(.minutes(5)))
struct PushConnectionLimitsTests {
    @Test func silentConnectionsAreCappedAndTimedOut() async throws {
        let directory = TemporaryDirectory.make()
        let port = try freeLoopbackPort()
        let daemon = try await DaemonProcess(
            stateDirectory: directory + "/state", socketPath: directory + "/bgd.sock",
            arguments: ["--push-port", "\(port)", "--push-connections-per-peer", "4", "--push-handshake-timeout", "10s"])
        // Five from the same address: one is over the per-peer cap and closed as it arrives. Which
        // one is not fixed: each connection is admitted on the event loop it was given, and two
        // loops may take them in either order.
        let five = try (0..<5).map { _ in try RawConnection(port: port) }
        let refused = await RawConnection.firstClosedByPeer(of: five, within: 5_000)
        #expect(refused != nil, "over the per-peer cap: one closed at once")
        let admitted = five.indices.filter { $0 != refused }.map { five[$0] }
        #expect(admitted.count == 4, "over the per-peer cap: only one closed")
        for connection in admitted { #expect(await !connection.closedByPeer(within: 100), "within the cap: open") }
        // None of the four starts TLS: each is closed when the handshake timeout passes (10 s: long
        // enough that a loaded test run still sees them open above, short enough to wait for).
        for connection in admitted {
            #expect(await connection.closedByPeer(within: 30_000), "closed after the handshake timeout")
        }
        // And the slots are free again: a real client gets through.
        let again = try RawConnection(port: port)
        #expect(await !again.closedByPeer(within: 100))
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit() == 0)
    }

    @Test func aStopDoesNotWaitForASilentConnection() async throws {
        let directory = TemporaryDirectory.make()
        let port = try freeLoopbackPort()
        let socket = directory + "/bgd.sock"
        let daemon = try await DaemonProcess(
            stateDirectory: directory + "/state", socketPath: socket,
            arguments: ["--push-port", "\(port)", "--push-handshake-timeout", "10m"])
        let silent = try RawConnection(port: port)
        daemon.signal(SIGTERM)
        // The grace period (5 s) ends it; without the cut the stop would hang for ten minutes.
        #expect(await silent.closedByPeer(within: 15_000), "cut at the end of the grace period")
        #expect(await daemon.waitForExit() == 0)
        #expect(!FileManager.default.fileExists(atPath: socket), "the socket is gone with bgd")
    }

    /// A port already taken — bgd's gateway's or dashboard's, bgrelay's provider or uplink
    /// port — is said before the process is ready, naming its own flag (bgrelay's provider port
    /// is `--port`, though it is the same gateway as bgd's), and it exits 69 (EX_UNAVAILABLE)
    /// instead of running without it.
    @Test(arguments: ["--push-port", "--http", "bgrelay --port", "bgrelay --uplink-port"])
    func aPortInUseStopsTheProcessBeforeItIsReady(listener: String) async throws {
        let directory = TemporaryDirectory.make()
        let taken = try UnservedLoopbackPort()
        defer { taken.close() }
        let port = taken.port
        let flag = String(listener.split(separator: " ").last!)
        let output: Command.Output
        if listener.hasPrefix("bgrelay") {
            let other = flag == "--port" ? "--uplink-port" : "--port"
            output = try await Command.run(
                try BuiltProducts.path(of: "bgrelay"),
                ["--state-dir", directory + "/relay", flag, "\(port)", other, "0"])
        } else {
            let arguments = flag == "--http" ? ["--push-port", "off", "--http", "127.0.0.1:\(port)"] : ["--push-port", "\(port)"]
            output = try await Command.run(
                try BuiltProducts.path(of: "bgd"),
                ["--state-dir", directory + "/state", "--socket", directory + "/bgd.sock"] + arguments)
        }
        #expect(output.status == 69)
        #expect(
            output.standardError.contains(
                "cannot listen on 127.0.0.1:\(port) (\(flag)): the address is already in use"),
            "\(output.standardError)")
        #expect(!output.standardError.contains("is ready"))
        // That error alone: the other listeners stop gracefully, not cancelled into errors of their own.
        #expect(!output.standardError.contains("CancellationError"), "\(output.standardError)")
    }
}

/// A TCP connection to 127.0.0.1 that sends nothing, to see when the other end closes it.
final class RawConnection {
    let descriptor: Int32

    init(port: Int) throws {
        descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = UInt16(port).bigEndian
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
            }
        }
        guard connected else {
            close(descriptor)
            throw POSIXError(.ECONNREFUSED)
        }
    }

    deinit { close(descriptor) }

    /// Which of `connections` the peer closes first, if one closes within the time given.
    static func firstClosedByPeer(of connections: [RawConnection], within milliseconds: Int32) async -> Int? {
        let descriptors = connections.map(\.descriptor)
        return await offThePool {
            var entries = descriptors.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            guard poll(&entries, nfds_t(entries.count), milliseconds) > 0 else { return nil }
            return entries.indices.first { entries[$0].revents != 0 && Self.isClosed(descriptors[$0]) }
        }
    }

    /// Whether the peer closed (or reset) the connection within the time given: waits on the
    /// kernel (poll) for the end of the stream, not on a timer of ours.
    func closedByPeer(within milliseconds: Int32) async -> Bool {
        let descriptor = self.descriptor
        return await Self.offThePool {
            var entry = pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0)
            return poll(&entry, 1, milliseconds) == 1 && Self.isClosed(descriptor)
        }
    }

    private static func isClosed(_ descriptor: Int32) -> Bool {
        var byte: UInt8 = 0
        return recv(descriptor, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT)) <= 0
    }

    /// The blocking poll runs on a thread of its own: on the test process's two cooperative
    /// threads it would stall every other test for seconds (in-process gateways among them).
    private static func offThePool<T: Sendable>(_ body: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: body()) }.start()
        }
    }
}
