import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Logging
import Testing

#if canImport(Glibc)
    import Glibc
#endif

@testable import BackgroundDaemon

/// bgd's uplink over HTTP/2 waits for the relay's response head only so long
/// (`connectWithin`): a relay that takes the connection and never answers — a stopped node, a
/// proxy whose upstream hangs — is a failed attempt, retried after the backoff. Before, the wait
/// had no deadline, and the device stayed deaf until bgd restarted.
struct PushUplinkDeadlineTests {
    @Test func aRelayThatTakesTheConnectionAndNeverAnswersIsAFailedAttempt() async throws {
        let directory = TemporaryDirectory.make()
        // A listener that never accepts: the kernel completes the handshake, the request is sent,
        // nothing ever answers.
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { generic in
                bind(listener, generic, length) == 0 && listen(listener, 8) == 0
                    && getsockname(listener, generic, &length) == 0
            }
        }
        try #require(bound)
        let port = Int(UInt16(bigEndian: address.sin_port))

        let credential = RelayEnrollment(url: "http://127.0.0.1:\(port)", device: "dev1", secret: "s3cret")
        try JSONEncoder().encode(credential).write(to: URL(fileURLWithPath: directory + "/push-relay.json"))
        let store = try BackgroundStore.open(atPath: directory + "/bgd.sqlite")
        let clock = ManualClock(now: Date(timeIntervalSince1970: 1_800_000_000))
        let uplink = PushUplink(
            configuration: .init(connectWithin: .seconds(30)), store: store, stateDirectory: directory, clock: clock,
            pushes: Doorbell(), logger: Logger(label: "test"))
        let running = Task { try await uplink.run() }
        defer { running.cancel() }

        // Connecting, its answer awaited on the clock: nothing happens however long real time
        // passes, until the limit has passed on it.
        #expect(await eventuallyAsync { await uplink.currentStatus().state == .connecting && clock.sleeperCount == 1 })
        clock.advance(by: .seconds(29))
        #expect(await uplink.currentStatus().state == .connecting)
        clock.advance(by: .seconds(1))
        #expect(await eventuallyAsync { await uplink.currentStatus().state == .waiting })
        let status = await uplink.currentStatus()
        #expect(status.lastError == "no answer within 30s", "\(status)")
        #expect(status.retryAt != nil, "\(status)")
    }
}
