import Background
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// An app's token can be shown again and rotated, a foreground app connects with the token file
/// bgd keeps in its container, and a registration can be replaced keeping the app's history
/// (issue 18).
@Suite(.timeLimit(.minutes(5)))
struct AppTokenTests {
    static let app = "com.example.tokens"

    /// The scheme's name is any case (RFC 9110): `bearer` is taken for an app and for the
    /// operator alike (it was refused as unauthorized); another scheme is not.
    @Test func theBearerSchemeIsTakenInAnyCase() async throws {
        try await TestDaemon.with { daemon in
            let token = try await daemon.register(Self.app, command: ["/bin/true"], interval: .never).token
            let operatorToken = try #require(DaemonClient.operatorToken(socketPath: daemon.socketPath))
            for scheme in ["bearer", "BEARER"] {
                let asApp = try await RawHTTP.request(daemon.socketPath, .GET, "/v1/app", token: token, scheme: scheme)
                #expect(asApp.status == 200, "\(scheme): \(asApp.status)")
                let asOperator = try await RawHTTP.request(
                    daemon.socketPath, .GET, "/v1/apps", token: operatorToken, scheme: scheme)
                #expect(asOperator.status == 200, "\(scheme): \(asOperator.status)")
            }
            let basic = try await RawHTTP.request(daemon.socketPath, .GET, "/v1/app", token: token, scheme: "Basic")
            #expect(basic.status == 401)
        }
    }

    /// The app may write its container: a link it leaves where bgd writes the token file's new
    /// copy (to a file it may not write itself) is not followed; the rotation replaces it.
    @Test func aLinkInTheContainerDoesNotTakeTheToken() async throws {
        try await TestDaemon.with { daemon in
            _ = try await daemon.register(Self.app, command: ["/bin/true"], interval: .never)
            let stateDirectory = daemon.daemon.configuration.stateDirectory
            let file = DaemonLocation.appTokenPath(of: AppID(rawValue: Self.app)!, stateDirectory: stateDirectory)
            let victim = daemon.directory + "/bashrc"
            try Data("# mine\n".utf8).write(to: URL(fileURLWithPath: victim))
            try FileManager.default.createSymbolicLink(atPath: file + ".new", withDestinationPath: victim)
            let rotated = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/token", as: AppTokenAnswer.self)
            #expect(try String(contentsOfFile: victim, encoding: .utf8) == "# mine\n")
            #expect(try String(contentsOfFile: file, encoding: .utf8) == rotated.token + "\n")
            let kind = try FileManager.default.attributesOfItem(atPath: file)[.type] as? FileAttributeType
            #expect(kind == .typeRegular)
        }
    }

    @Test func theTokenIsKeptShownAndRotated() async throws {
        try await TestDaemon.with { daemon in
            let registered = try await daemon.register(Self.app, command: ["/bin/true"], interval: .never)
            let stateDirectory = daemon.daemon.configuration.stateDirectory
            let file = DaemonLocation.appTokenPath(of: AppID(rawValue: Self.app)!, stateDirectory: stateDirectory)
            let mode = try FileManager.default.attributesOfItem(atPath: file)[.posixPermissions] as? Int
            #expect(mode == 0o600, "the token file is the user's alone")
            let shown = try await daemon.admin.send(.get, "/v1/apps/\(Self.app)/token", as: AppTokenAnswer.self)
            #expect(shown.token == registered.token)

            // A foreground app with no token to copy: it reads the file.
            let foreground = try BackgroundApplication(
                appID: AppID(rawValue: Self.app)!, stateDirectory: stateDirectory, socketPath: daemon.socketPath)
            try await foreground.setMinimumBackgroundFetchInterval(.minimum)

            // Rotation: a new token in the file, the old one refused at once.
            let rotated = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/token", as: AppTokenAnswer.self)
            #expect(rotated.token != registered.token)
            #expect(try String(contentsOfFile: file, encoding: .utf8) == rotated.token + "\n")
            let stale = BackgroundApplication(
                appID: AppID(rawValue: Self.app)!, token: registered.token, socketPath: daemon.socketPath)
            await #expect(throws: BackgroundError.self) { try await stale.setMinimumBackgroundFetchInterval(.never) }
            let fresh = try BackgroundApplication(
                appID: AppID(rawValue: Self.app)!, stateDirectory: stateDirectory, socketPath: daemon.socketPath)
            try await fresh.setMinimumBackgroundFetchInterval(.never)

            // The same through bgctl.
            let bgctl = try BuiltProducts.path(of: "bgctl")
            let printed = try await Command.run(bgctl, ["token", Self.app, "--socket", daemon.socketPath])
            #expect(printed.status == 0 && printed.standardOutput == rotated.token + "\n", "\(printed.standardError)")
            let again = try await Command.run(bgctl, ["token", Self.app, "--rotate", "--socket", daemon.socketPath])
            let kept = try String(contentsOfFile: file, encoding: .utf8)
            #expect(again.status == 0 && kept == again.standardOutput)

            // An app bgd does not know: a clear 404, nothing made — shown or rotated, the same
            // unknownApp as every other command says (not "its token file is missing … --rotate").
            for method in [DaemonClient.Method.get, .post] {
                do {
                    _ = try await daemon.admin.send(
                        method, "/v1/apps/com.example.nobody/token", as: AppTokenAnswer.self)
                    Issue.record("\(method): a token for an app bgd does not know")
                } catch let error as BackgroundError {
                    #expect(error.apiErrorCode == .unknownApp, "\(method): \(error)")
                }
            }
            let unknown = try await Command.run(
                bgctl, ["token", "com.example.nobody", "--json", "--socket", daemon.socketPath])
            let refusal = try JSONSerialization.jsonObject(with: Data(unknown.standardError.utf8)) as? [String: String]
            #expect(unknown.status == 3 && refusal?["error"] == "unknownApp", "\(unknown.standardError)")
            #expect(refusal?["reason"]?.contains("no app com.example.nobody is registered") == true)
            #expect(
                !FileManager.default.fileExists(
                    atPath: DaemonLocation.appTokenPath(
                        of: AppID(rawValue: "com.example.nobody")!, stateDirectory: stateDirectory)))
        }
    }

    @Test func aReplacedRegistrationKeepsTheAppsHistory() async throws {
        try await TestDaemon.with { daemon in
            let fixture = try BuiltProducts.path(of: "bgd-fixture-app")
            let registered = try await daemon.register(Self.app, command: [fixture, "newData"], interval: .minimum)
            let run = try await daemon.waitForRunEnd(of: Self.app) {
                _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/fetch", as: RunRecord.self)
            }
            _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/opens")

            let replaced = try await daemon.admin.send(
                .put, "/v1/apps/\(Self.app)",
                body: RegisterAppRequest(
                    id: AppID(rawValue: Self.app)!, launchCommand: LaunchCommand([fixture, "noData"])!,
                    taskIdentifiers: ["com.example.tokens.refresh"]),
                as: RegisteredApp.self)
            #expect(replaced.token == registered.token, "the same token")
            #expect(replaced.app.fetchInterval == .minimum, "an interval not given stays")
            let history = try await daemon.store.runs(of: AppID(rawValue: Self.app)!)
            #expect(history.map(\.id) == [run.id], "its runs stay")
            #expect(try await daemon.store.opens(of: AppID(rawValue: Self.app)!).count == 1, "its opens stay")
            let stored = try #require(try await daemon.store.app(AppID(rawValue: Self.app)!))
            #expect(stored.launchCommand.arguments == [fixture, "noData"])
            #expect(stored.taskIdentifiers == ["com.example.tokens.refresh"])

            // Bad input changes nothing: a program that does not exist, an id not in the path.
            for (path, command) in [
                ("/v1/apps/\(Self.app)", ["/nonexistent/app"]), ("/v1/apps/com.example.other", [fixture]),
            ] {
                await #expect(throws: BackgroundError.self) {
                    _ = try await daemon.admin.send(
                        .put, path,
                        body: RegisterAppRequest(
                            id: AppID(rawValue: Self.app)!, launchCommand: LaunchCommand(command)!),
                        as: RegisteredApp.self)
                }
            }
            let unchanged = try #require(try await daemon.store.app(AppID(rawValue: Self.app)!))
            #expect(unchanged.launchCommand.arguments == [fixture, "noData"])
        }
    }
}

extension AppTokenTests {
    /// bgd is killed after a rotation's new hash is committed and before the token file is
    /// replaced: the next bgd puts the staged token in place, so the app's file holds the token
    /// bgd accepts. Before, the container kept the old token, refused until the operator rotated
    /// again. A staged file that is not the stored token (the app's doing) is removed.
    @Test func aRotationCutShortByACrashIsFinishedAtTheNextStart() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let (state, socket) = (directory + "/state", directory + "/bgd.sock")
        let admin = DaemonClient(socketPath: socket)
        let app = AppID(rawValue: Self.app)!
        let crashing = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, environment: ["BGD_FAILPOINT": "app.afterTokenCommit:2"])
        let old = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(id: app, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .never),
            as: RegisteredApp.self
        ).token
        let file = DaemonLocation.appTokenPath(of: app, stateDirectory: state)
        #expect(try String(contentsOfFile: file, encoding: .utf8) == old + "\n")
        await #expect(throws: (any Error).self, "no answer: bgd was killed") {
            try await admin.send(.post, "/v1/apps/\(Self.app)/token", as: AppTokenAnswer.self)
        }
        _ = await crashing.waitForExit()
        #expect(try String(contentsOfFile: file, encoding: .utf8) == old + "\n", "the crash came before the rename")
        let other = DaemonLocation.appTokenPath(of: AppID(rawValue: "com.example.other")!, stateDirectory: state)
        try FileManager.default.createDirectory(
            atPath: (other as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data("not-a-token\n".utf8).write(to: URL(fileURLWithPath: other + ".new.planted"))

        var daemon = try await DaemonProcess(stateDirectory: state, socketPath: socket)
        defer { daemon.signal(SIGKILL) }
        let kept = try String(contentsOfFile: file, encoding: .utf8).trimmingCharacters(in: .whitespacesAndNewlines)
        let container = (file as NSString).deletingLastPathComponent
        #expect(kept != old, "the rotated token is in place")
        #expect(try FileManager.default.contentsOfDirectory(atPath: container).filter { $0.contains(".new") }.isEmpty)
        #expect(
            !FileManager.default.fileExists(atPath: other + ".new.planted"), "a staged file bgd did not commit goes")
        let summary = try await DaemonClient(socketPath: socket, token: kept).send(.get, "/v1/app", as: AppSummary.self)
        #expect(summary.id == app, "bgd accepts the token the app's file holds")
        await #expect(throws: (any Error).self, "and refuses the old one") {
            try await DaemonClient(socketPath: socket, token: old).send(.get, "/v1/app", as: AppSummary.self)
        }

        // What a container holds never stops bgd from starting: the app's own token staged again,
        // and its token file made a directory, so it cannot be put in place.
        daemon.signal(SIGTERM)
        _ = await daemon.waitForExit()
        try Data((kept + "\n").utf8).write(to: URL(fileURLWithPath: file + ".new.again"))
        try FileManager.default.removeItem(atPath: file)
        try FileManager.default.createDirectory(atPath: file + "/inside", withIntermediateDirectories: true)
        daemon = try await DaemonProcess(stateDirectory: state, socketPath: socket)
        #expect(!FileManager.default.fileExists(atPath: file + ".new.again"))
        #expect(try await admin.send(.get, "/v1/apps", as: [AppSummary].self).map(\.id) == [app])
    }
}
