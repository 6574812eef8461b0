import BackgroundModel
import BackgroundTesting
import Foundation
import Logging
import Testing

@testable import BackgroundRelay

/// A relay on its own SQLite file learns of credentials another process changed (`bgrelay keys
/// remove`, run beside it) within a second, on time that really passes. Before, the second was
/// counted on the wall clock: set back an hour, a removed provider key went on being taken for
/// the hour.
struct CredentialsRefreshTests {
    @Test func theClockSetBackDoesNotHoldAnotherProcesssChangeBack() async throws {
        let directory = TemporaryDirectory.make() + "/relay"
        let store = try Relay.openStore(in: directory)
        let clock = ManualClock()
        let destinations = RelayDestinations(
            store: store, hub: DeviceHub(), clock: clock, logger: Logger(label: "test"))
        let before = try await store.credentialsVersion()
        _ = destinations.credentialsGeneration  // the first read
        #expect(try await SessionRoundsTests().eventually { destinations.credentialsGeneration == before })

        clock.jump(by: .seconds(-3600))
        // Another process (a `bgrelay` command) changes the credentials in the same file.
        let other = try Relay.openStore(in: directory)
        let (device, _) = try await other.enroll(now: clock.now)
        try await other.register(
            token: String(repeating: "ab", count: 32), topic: "com.example.app", device: device, now: clock.now)
        let after = try await other.credentialsVersion()
        #expect(after > before)

        clock.advance(by: .seconds(2))
        #expect(try await SessionRoundsTests().eventually { destinations.credentialsGeneration == after })
    }
}
