import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

@testable import BackgroundRelay

/// The uplink's wait before it connects again is time that passes. Before, it waited until a
/// wall-clock time: the clock set back an hour just as the relay dropped the uplink left the
/// device deaf to pushes for the hour.
@Suite(.timeLimit(.minutes(5)))
struct PushUplinkClockTests {
    @Test func theClockSetBackDoesNotHoldTheReconnectionOff() async throws {
        try await RelayNode.with { node in
            let relay = PushUplink.Configuration(url: node.uplinkURL, certificate: node.certificatePath)
            try await TestDaemon.with(pushRelay: relay) { daemon in
                func state() async -> PushRelayStatus.State? {
                    try? await daemon.admin.send(.get, "/v1/push/relay", as: PushRelayStatus.self).state
                }
                #expect(await eventuallyAsync { await state() == .connected })
                node.relay.hub.disconnectAll()  // the relay ends the uplink
                // Waiting: the status is set with the wait's deadline, in one step of the uplink.
                #expect(await eventuallyAsync { await state() == .waiting })
                daemon.clock.jump(by: .seconds(-3600))
                daemon.clock.advance(by: .seconds(2))
                #expect(await eventuallyAsync { await state() == .connected })
            }
        }
    }
}
