import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// `bgctl register --manifest FILE`: an app declares itself in a file, as Info.plist does on
/// iOS; registering from it is idempotent, a changed file is an update that keeps the app's
/// history, and a bad file is refused naming the field, changing nothing (issue 18).
@Suite(.timeLimit(.minutes(5)))
struct AppManifestTests {
    static let app = "com.example.manifest"

    @Test func registeringFromAManifestIsIdempotent() async throws {
        try await TestDaemon.with { daemon in
            let directory = daemon.directory + "/app"
            try FileManager.default.createDirectory(atPath: directory + "/bin", withIntermediateDirectories: true)
            try FileManager.default.copyItem(atPath: "/bin/true", toPath: directory + "/bin/manifest-app")
            let manifest = directory + "/bgapp.json"
            func write(_ json: String) throws { try json.write(toFile: manifest, atomically: true, encoding: .utf8) }
            func register() async throws -> Command.Output {
                try await Command.run(
                    try BuiltProducts.path(of: "bgctl"),
                    ["register", "--manifest", manifest, "--socket", daemon.socketPath])
            }
            try write(
                #"{"id": "com.example.manifest", "launch": ["bin/manifest-app", "--background"], "interval": "30m", "taskIdentifiers": ["com.example.manifest.refresh"], "pushTopic": "com.example.manifest"}"#
            )
            let first = try await register()
            #expect(first.status == 0 && first.standardOutput.contains("Registered"), "\(first.standardError)")
            let id = AppID(rawValue: Self.app)!
            let registered = try #require(try await daemon.store.app(id))
            #expect(registered.launchCommand.arguments == [directory + "/bin/manifest-app", "--background"])
            #expect(registered.fetchInterval == .every(.seconds(1800)))
            #expect(registered.taskIdentifiers == ["com.example.manifest.refresh"])
            let token = try await daemon.admin.send(.get, "/v1/apps/\(Self.app)/token", as: AppTokenAnswer.self)

            // The same file again: nothing changes.
            let again = try await register()
            #expect(again.status == 0 && again.standardOutput.contains("nothing changed"), "\(again.standardOutput)")
            #expect(try await daemon.store.app(id) == registered)
            // --quiet prints the token alone, changed or not (a script's `TOKEN=$(…)` takes it).
            let quietly = try await Command.run(
                try BuiltProducts.path(of: "bgctl"),
                ["register", "--manifest", manifest, "--quiet", "--socket", daemon.socketPath])
            #expect(quietly.status == 0 && quietly.standardOutput == token.token + "\n", "\(quietly.standardOutput)")

            // No bgd at the socket, --json: the code says so (it was "failed").
            let unreachable = try await Command.run(
                try BuiltProducts.path(of: "bgctl"),
                ["register", "--manifest", manifest, "--json", "--socket", daemon.directory + "/none.sock"])
            #expect(
                unreachable.status == 69 && unreachable.standardError.contains(#""error":"daemonUnreachable""#),
                "\(unreachable)")

            // A changed file is an update; the app keeps its token and history.
            _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/opens")
            try write(#"{"id": "com.example.manifest", "launch": ["bin/manifest-app"], "interval": "minimum"}"#)
            let updated = try await register()
            #expect(updated.status == 0 && updated.standardOutput.contains("Updated"), "\(updated.standardError)")
            let now = try #require(try await daemon.store.app(id))
            #expect(now.launchCommand.arguments == [directory + "/bin/manifest-app"] && now.fetchInterval == .minimum)
            #expect(now.taskIdentifiers.isEmpty && now.registeredAt == registered.registeredAt)
            #expect(try await daemon.store.opens(of: id).count == 1)
            #expect(
                try await daemon.admin.send(.get, "/v1/apps/\(Self.app)/token", as: AppTokenAnswer.self) == token)

            // Bad manifests are refused, naming what is wrong, and change nothing.
            let bad: [(String, String)] = [
                (
                    #"{"id": "com.example.manifest", "launch": ["bin/manifest-app"], "colour": "red"}"#,
                    "unknown field 'colour'"
                ),
                (#"{"id": "com.example.manifest"}"#, "'launch' is required"),
                (#"{"id": "not an id", "launch": ["/bin/true"]}"#, "id 'not an id'"),
                (#"{"id": "com.example.manifest", "launch": ["/bin/true"], "interval": "soon"}"#, "interval 'soon'"),
                (#"{"id": "com.example.manifest", "launch": ["/bin/true"], "pushTopic": "com.other"}"#, "pushTopic"),
                (#"[1, 2]"#, "a JSON object is expected"),
                (#"{"id": "com.example.manifest", "launch": ["bin/missing-app"]}"#, "not an executable file"),
            ]
            for (json, complaint) in bad {
                try write(json)
                let refused = try await register()
                #expect(
                    refused.status != 0 && refused.standardError.contains(complaint),
                    "\(json): \(refused.standardError)")
            }
            #expect(try await daemon.store.app(id) == now)
        }
    }
}
