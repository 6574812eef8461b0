import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Crypto
import Foundation
import Testing

/// Device tokens and provider keys: what a provider under test needs before it can push.
@Suite(.timeLimit(.minutes(5)))
struct PushRegistrationTests {
    static let app = "com.example.pushnews"

    func bgctl(_ arguments: [String], _ daemon: TestDaemon) async throws -> Command.Output {
        try await Command.run(try BuiltProducts.path(of: "bgctl"), arguments + ["--socket", daemon.socketPath])
    }

    @Test func aDeviceTokenIsStableUntilRevoked() async throws {
        let directory = TemporaryDirectory.make()
        let first: String = try await TestDaemon.with(directory: directory) { daemon in
            let registered = try await daemon.register(Self.app, command: ["/bin/true"], interval: .never)
            let application = BackgroundApplication(
                appID: AppID(rawValue: Self.app)!, token: registered.token, socketPath: daemon.socketPath)
            let recorder = TokenRecorder()
            application.delegate = recorder
            let token = try await application.registerForRemoteNotifications()
            #expect(token.count == 64 && token.allSatisfy(\.isHexDigit))
            #expect(recorder.tokens == [token])
            #expect(try await application.registerForRemoteNotifications() == token)
            let printed = try await bgctl(["push", "token", Self.app], daemon)
            #expect(printed.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines) == token)
            return token
        }
        try await TestDaemon.with(directory: directory) { daemon in
            // bgd restarted: same token, and bgctl can still print it.
            let printed = try await bgctl(["push", "token", Self.app], daemon)
            #expect(printed.standardOutput.trimmingCharacters(in: .whitespacesAndNewlines) == first)
            let owner = try await daemon.store.deviceTokenOwner(first)
            #expect(owner?.app.rawValue == Self.app && owner?.revokedAt == nil)
            // Several at once (the relay's uplink looks up a read of pushes so): in any case, a
            // token twice is one answer, one never issued is missing.
            let unknown = String(repeating: "0", count: 64)
            let owners = try await daemon.store.deviceTokenOwners([first.uppercased(), first, unknown])
            #expect(owners.count == 1 && owners[first]?.app.rawValue == Self.app && owners[first]?.revokedAt == nil)
            #expect(try await daemon.store.deviceTokenOwners([]).isEmpty)
            // Unregistering the app revokes it: a push would answer 410 with this time.
            try await daemon.admin.send(.delete, "/v1/apps/\(Self.app)")
            #expect(try await daemon.store.deviceTokenOwner(first)?.revokedAt == daemon.clock.now)
            #expect(try await daemon.store.deviceTokenOwners([first])[first]?.revokedAt == daemon.clock.now)
            let none = try await bgctl(["push", "token", Self.app], daemon)
            #expect(none.status != 0 && none.standardError.contains("com.example.pushnews"))
        }
    }

    @Test func providerKeysKeepOnlyThePublicHalf() async throws {
        try await TestDaemon.with { daemon in
            let privateKey = P256.Signing.PrivateKey()
            let file = daemon.directory + "/AuthKey_ABC123DEFG.p8"
            try privateKey.pemRepresentation.write(toFile: file, atomically: true, encoding: .utf8)
            let added = try await bgctl(
                [
                    "push", "keys", "add", "--key-id", "ABC123DEFG", "--team-id", "TEAM123456", "--topics", Self.app,
                    file,
                ], daemon)
            #expect(added.status == 0, "\(added.standardError)")
            let keys = try await daemon.admin.send(.get, "/v1/push/keys", as: [ProviderKeyRegistration].self)
            #expect(keys.count == 1 && keys[0].topics == [Self.app])
            #expect(keys[0].publicKeyPEM == privateKey.publicKey.pemRepresentation)
            #expect(!keys[0].publicKeyPEM.contains("PRIVATE"))
            let stored = try Data(contentsOf: URL(fileURLWithPath: daemon.directory + "/state/bgd.sqlite"))
            #expect(stored.range(of: Data("PRIVATE KEY".utf8)) == nil)

            for arguments in [
                ["--key-id", "short", "--team-id", "TEAM123456", "--topics", Self.app, file],
                ["--key-id", "ABC123DEFG", "--team-id", "TEAM123456", "--topics", "not an app id", file],
                ["--key-id", "ABC123DEFG", "--team-id", "TEAM123456", "--topics", Self.app, "/etc/hostname"],
            ] {
                let refused = try await bgctl(["push", "keys", "add"] + arguments, daemon)
                #expect(refused.status != 0 && !refused.standardError.isEmpty, "\(arguments)")
            }
            let forged =
                #"{"keyID":"ABC123DEFG","teamID":"TEAM123456","topics":["com.example.a"],"publicKeyPEM":"-----BEGIN PUBLIC KEY-----\nAAAA\n-----END PUBLIC KEY-----"}"#
            let answer = try await RawHTTP.request(daemon.socketPath, .POST, "/v1/push/keys", body: Data(forged.utf8))
            #expect(answer.status == 400 && answer.errorCode == "invalidProviderKey")
            // A key id goes into the request's path: what is not one is a usage error, and
            // removes nothing (`ABC123DEFG?x` removed ABC123DEFG; a space read as "cannot reach bgd").
            for notAnID in ["ABC123DEFG?x", "A B", "abc123defg", "ABC/23DEFG"] {
                let refused = try await bgctl(["push", "keys", "remove", notAnID], daemon)
                #expect(refused.status == 64 && refused.standardError.contains("not a Key ID"), "\(notAnID): \(refused)")
            }
            #expect(try await bgctl(["push", "keys", "remove", "ABC123DEFG"], daemon).status == 0)
            #expect(try await daemon.admin.send(.get, "/v1/push/keys", as: [ProviderKeyRegistration].self).isEmpty)
        }
    }
}

final class TokenRecorder: BackgroundApplicationDelegate, @unchecked Sendable {
    // @unchecked: written and read by one test task in sequence.
    var tokens: [String] = []
    func application(
        _ application: BackgroundApplication,
        performFetchWithCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void
    ) { completionHandler(.noData) }
    func application(
        _ application: BackgroundApplication, didRegisterForRemoteNotificationsWithDeviceToken deviceToken: String
    ) {
        tokens.append(deviceToken)
    }
}
