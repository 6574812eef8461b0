import AsyncHTTPClient
import Background
import BackgroundDaemon
import BackgroundGateway
import BackgroundModel
import BackgroundPolicy
import BackgroundTesting
import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization
import Testing

/// The APNs provider API on bgd's gateway, over HTTP/2 with TLS (the self-signed certificate
/// trusted), with a real client: each reason from a request built to cause it.
@Suite(.timeLimit(.minutes(5)))
struct PushGatewayTests {
    static let app = "com.example.pushnews"
    static let other = "com.example.other"
    static let keyID = "ABC123DEFG"
    static let teamID = "TEAM123456"

    struct Provider {
        let client: HTTPClient
        let base: String
        let key: P256.Signing.PrivateKey
        let now: Date
        /// The app's own token (for a foreground process of it).
        var appToken = ""

        func jwt(
            iat: Date? = nil, key: P256.Signing.PrivateKey? = nil, kid: String = PushGatewayTests.keyID
        ) throws -> String {
            func encode(_ data: Data) -> String {
                data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(
                    of: "/", with: "_"
                )
                .replacingOccurrences(of: "=", with: "")
            }
            let header = encode(Data(#"{"alg":"ES256","kid":"\#(kid)"}"#.utf8))
            let claims = encode(
                Data(#"{"iss":"\#(PushGatewayTests.teamID)","iat":\#(Int((iat ?? now).timeIntervalSince1970))}"#.utf8))
            let signature = try (key ?? self.key).signature(for: Data("\(header).\(claims)".utf8)).rawRepresentation
            return "\(header).\(claims).\(encode(signature))"
        }

        /// Sends a push; returns status, APNs reason, apns-id and the HTTP version.
        func send(
            token: String, method: HTTPMethod = .POST, path: String? = nil, headers: [(String, String)] = [],
            body: String? = nil,
            bodyData: Data? = nil, authorization: String?? = nil
        ) async throws -> (status: Int, reason: String?, apnsID: String?, version: HTTPVersion, json: [String: Any]) {
            var request = HTTPClientRequest(url: base + (path ?? "/3/device/\(token)"))
            request.method = method
            let auth = try authorization ?? ("bearer " + jwt())
            if let auth { request.headers.add(name: "authorization", value: auth) }
            var defaults = [
                ("apns-topic", PushGatewayTests.app), ("apns-push-type", "background"), ("apns-priority", "5"),
            ]
            defaults.removeAll { name in headers.contains { $0.0 == name.0 } }
            for (name, value) in defaults + headers where !value.isEmpty {
                request.headers.add(name: name, value: value)
            }
            let payload = bodyData ?? Data((body ?? #"{"aps":{"content-available":1},"content-id":42}"#).utf8)
            request.body = .bytes(ByteBuffer(bytes: payload))
            // A bound on failure only: a loaded 2-core machine can take seconds for the first TLS handshake.
            let response = try await client.execute(request, timeout: .seconds(60))
            let data = try await response.body.collect(upTo: 1 << 16)
            let json = (try? JSONSerialization.jsonObject(with: Data(buffer: data))) as? [String: Any] ?? [:]
            return (
                Int(response.status.code), json["reason"] as? String, response.headers.first(name: "apns-id"),
                response.version, json
            )
        }
    }

    func withGateway(
        command: [String] = ["/bin/true"], throttle: PushThrottle = PushThrottle(),
        floodLimit: PushFloodLimit = PushFloodLimit(),
        now: Date = Date(timeIntervalSince1970: 1_767_603_600), directory: String? = nil,
        retention: HistoryPruner.Configuration = .init(),
        _ body: @Sendable (Provider, TestDaemon, (String) async throws -> String) async throws -> Void
    ) async throws {
        try await TestDaemon.with(
            clock: ManualClock(now: now), directory: directory,
            push: .init(port: 0, throttle: throttle, floodLimit: floodLimit), retention: retention
        ) { daemon in
            let gateway = try #require(daemon.daemon.pushGateway)
            let port = await gateway.boundPort.wait()
            var tls = TLSConfiguration.makeClientConfiguration()
            tls.additionalTrustRoots = [.file(gateway.certificatePath)]
            var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
            configuration.httpVersion = .automatic
            let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
            let key = P256.Signing.PrivateKey()
            let registered = try await daemon.register(Self.app, command: command, interval: .never)
            try await daemon.register(Self.other, command: ["/bin/true"], interval: .never)
            _ = try await daemon.admin.send(
                .post, "/v1/push/keys",
                body: ProviderKeyRegistration(
                    keyID: Self.keyID, teamID: Self.teamID, topics: [Self.app, Self.other],
                    publicKeyPEM: key.publicKey.pemRepresentation),
                as: ProviderKeyRegistration.self)
            var provider = Provider(client: client, base: "https://localhost:\(port)", key: key, now: daemon.clock.now)
            provider.appToken = registered.token
            let tokenOf: (String) async throws -> String = { app in
                try await daemon.admin.send(.post, "/v1/apps/\(app)/push/token", as: DeviceTokenInfo.self).token
            }
            do {
                try await body(provider, daemon, tokenOf)
            } catch {
                try? await client.shutdown()
                throw error
            }
            try await client.shutdown()
        }
    }

    /// A flood is pruned as it comes, not at the pruner's next 6-hourly pass: every 10 × an
    /// app's kept pushes stored ring it (here 5 kept: every 50). The clock never moves.
    @Test func aFloodOfPushesIsPrunedAsItComes() async throws {
        try await withGateway(retention: .init(retention: .init(pushesKeptPerApp: 5))) { provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            for _ in 0..<120 {
                let answer = try await provider.send(
                    token: token, headers: [("apns-push-type", "alert"), ("apns-priority", "10")])
                #expect(answer.status == 200, "\(answer)")
            }
            // 120 recorded: without the rings all of them would stay until the timer's pass.
            try await daemon.waitUntil {
                try await daemon.store.pushes(of: AppID(rawValue: Self.app)!, limit: 200).count <= 30
            }
        }
    }

    @Test func aValidBackgroundPushIsQueuedOverHTTP2() async throws {
        try await withGateway { provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            let id = "123e4567-e89b-12d3-a456-426614174000"
            let answer = try await provider.send(token: token, headers: [("apns-id", id)])
            #expect(answer.status == 200 && answer.apnsID == id && answer.version == .http2, "\(answer)")
            let pushes = try await daemon.store.pushes(of: AppID(rawValue: Self.app)!)
            // Committed before the 200; the dispatcher may already have woken the app with it (in
            // flight with its run, or answered).
            #expect(
                pushes.count == 1 && [PushState.queued, .delivering, .delivered].contains(pushes[0].state)
                    && pushes[0].apnsID == id,
                "\(pushes)")
            // An alert push is accepted and recorded, but wakes nothing.
            let alert = try await provider.send(
                token: token, headers: [("apns-push-type", "alert"), ("apns-priority", "10")],
                body: #"{"aps":{"alert":"hello"}}"#)
            #expect(alert.status == 200 && alert.apnsID != nil)
            #expect(try await daemon.store.pushes(of: AppID(rawValue: Self.app)!).first?.state == .recorded)
        }
    }

    @Test func eachReasonComesFromARequestBuiltForIt() async throws {
        try await withGateway { provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            let otherToken = try await tokenOf(Self.other)
            func reason(
                _ answer: (status: Int, reason: String?, apnsID: String?, version: HTTPVersion, json: [String: Any])
            ) -> String {
                "\(answer.status) \(answer.reason ?? "-")"
            }
            let unknown = String(repeating: "0", count: 64)
            #expect(
                reason(try await provider.send(token: token, authorization: .some(nil))) == "403 MissingProviderToken")
            #expect(
                reason(
                    try await provider.send(
                        token: token, authorization: "bearer " + provider.jwt(key: P256.Signing.PrivateKey())))
                    == "403 InvalidProviderToken")
            #expect(
                reason(
                    try await provider.send(token: token, authorization: "bearer " + provider.jwt(kid: "ZZZ999ZZZZ")))
                    == "403 InvalidProviderToken")
            #expect(
                reason(
                    try await provider.send(
                        token: token,
                        authorization: "bearer " + provider.jwt(iat: provider.now.addingTimeInterval(-3601))))
                    == "403 ExpiredProviderToken")
            #expect(reason(try await provider.send(token: token, path: "/3/other/\(token)")) == "404 BadPath")
            #expect(reason(try await provider.send(token: token, method: .GET)) == "405 MethodNotAllowed")
            #expect(reason(try await provider.send(token: unknown)) == "400 BadDeviceToken")
            #expect(reason(try await provider.send(token: "xyz")) == "400 BadDeviceToken")
            #expect(reason(try await provider.send(token: otherToken)) == "400 DeviceTokenNotForTopic")
            #expect(
                reason(try await provider.send(token: token, headers: [("apns-topic", "com.example.nobody")]))
                    == "400 TopicDisallowed")
            #expect(
                reason(try await provider.send(token: token, headers: [("apns-priority", "10")])) == "400 BadPriority")
            #expect(
                reason(try await provider.send(token: token, body: #"{"aps":{"content-available":1,"alert":"x"}}"#))
                    == "400 InvalidPushType")
            #expect(
                reason(try await provider.send(token: token, headers: [("apns-push-type", "smoke-signal")]))
                    == "400 InvalidPushType")
            #expect(
                reason(try await provider.send(token: token, bodyData: Data(repeating: 0x20, count: 5000)))
                    == "413 PayloadTooLarge")
            #expect(reason(try await provider.send(token: token, bodyData: Data())) == "400 PayloadEmpty")
            #expect(
                reason(
                    try await provider.send(
                        token: token, headers: [("apns-collapse-id", String(repeating: "c", count: 65))]))
                    == "400 BadCollapseId")
            #expect(
                reason(try await provider.send(token: token, headers: [("apns-expiration", "soon")]))
                    == "400 BadExpirationDate")
            #expect(reason(try await provider.send(token: token, headers: [("apns-id", "nope")])) == "400 BadMessageId")
            #expect(reason(try await provider.send(token: token, headers: [("apns-topic", "")])) == "400 MissingTopic")
            #expect(reason(try await provider.send(token: token, body: "not json")) == "400 InvalidPayload")
            // A new token for the same key within 20 minutes.
            let refreshed = "bearer " + (try provider.jwt(iat: provider.now.addingTimeInterval(-60)))
            _ = try await provider.send(token: token)  // the current token is now the one in use
            #expect(reason(try await provider.send(token: token, authorization: .some(refreshed))) == "200 -")
            let tooSoon = "bearer " + (try provider.jwt(iat: provider.now.addingTimeInterval(30)))
            #expect(
                reason(try await provider.send(token: token, authorization: .some(tooSoon)))
                    == "429 TooManyProviderTokenUpdates")
            // Revoked: 410 with the time it stopped counting.
            try await daemon.store.revokeDeviceTokens(of: AppID(rawValue: Self.app)!, now: daemon.clock.now)
            let gone = try await provider.send(token: token)
            #expect(reason(gone) == "410 Unregistered")
            #expect((gone.json["timestamp"] as? Int) == Int(daemon.clock.now.timeIntervalSince1970 * 1000))
            // None of the refused pushes was queued.
            #expect(try await daemon.store.pushes(of: AppID(rawValue: Self.app)!).count == 2)
        }
    }

    /// The fixture's log, without the apns-id it notes on each push line (`push 42 apns …`).
    func log(_ daemon: TestDaemon) -> [String] {
        Self.lines(ofFixtureLog: daemon.directory + "/state/containers/\(Self.app)/fixture.log")
    }

    static func lines(ofFixtureLog path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map { line in
            String(line.split(separator: " apns ", maxSplits: 1).first ?? line)
        }
    }

    func fixture() throws -> [String] { [try BuiltProducts.path(of: "bgd-fixture-app"), "newData"] }

    /// The push wakes the stopped app (launched with reason remote-notification), which answers
    /// like a fetch; the run is in the app's history with the push's reason.
    @Test func aPushLaunchesAStoppedAppWhichAnswers() async throws {
        try await withGateway(command: try fixture()) { provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            let run = try await daemon.waitFor(
                { activity -> RunRecord? in
                    if case .runEnded(let run) = activity, run.app.rawValue == Self.app { return run }
                    return nil
                },
                after: {
                    let answer = try await provider.send(token: token)
                    #expect(answer.status == 200)
                })
            #expect(run.trigger == .remoteNotification && run.outcome == .newData, "\(run)")
            #expect(run.reasons.first?.code == .pushWake)
            #expect(log(daemon) == ["push 42"])
            #expect(try await daemon.store.pushes(of: AppID(rawValue: Self.app)!).first?.state == .delivered)
        }
    }

    /// A push sent `apns-expiration: 0` (now or never) while the app runs a fetch is dropped,
    /// not held until the run ends; one sent without waits for it. Before, both waited, and the
    /// now-or-never push reached the app up to a budget later (a processing task's: minutes).
    @Test func aNowOrNeverPushIsNotHeldForARunInFlight() async throws {
        try await withGateway(command: [try BuiltProducts.path(of: "bgd-fixture-app"), "hang"]) {
            provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            let app = AppID(rawValue: Self.app)!
            _ = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/fetch", as: RunRecord.self)
            func handled(_ headers: [(String, String)]) async throws -> PushDispatch {
                try await daemon.waitFor(
                    { activity -> PushDispatch? in
                        if case .pushHandled(app, _, let outcome) = activity { return outcome }
                        return nil
                    },
                    after: {
                        let answer = try await provider.send(token: token, headers: headers)
                        #expect(answer.status == 200)
                    })
            }
            #expect(try await handled([("apns-expiration", "0")]) == .dropped)
            let dropped = try #require(try await daemon.store.pushes(of: app).first)
            #expect(dropped.reasonCode == .pushExpired && dropped.reason?.contains("now or never") == true)
            #expect(try await handled([]) == .waiting)
        }
    }

    /// Beyond its allowance an app is not woken; the pushes that wait are coalesced to the newest,
    /// which goes when the next wake is allowed; one that expires first is dropped with a reason.
    @Test func throttledPushesKeepTheNewestAndExpire() async throws {
        try await withGateway(command: try fixture(), throttle: PushThrottle(wakesPerHour: 3, burst: 1)) {
            provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            func push(_ id: Int, _ headers: [(String, String)] = []) async throws {
                let answer = try await provider.send(
                    token: token, headers: headers, body: #"{"aps":{"content-available":1},"content-id":\#(id)}"#)
                #expect(answer.status == 200)
            }
            _ = try await daemon.waitForRunEnd(of: Self.app) { try await push(1) }
            try await push(2)
            try await push(3)
            let expiring = Int(daemon.clock.now.timeIntervalSince1970) + 60
            try await push(4, [("apns-collapse-id", "scores"), ("apns-expiration", String(expiring))])
            let app = AppID(rawValue: Self.app)!
            try await daemon.waitUntil {
                let pushes = try await daemon.store.pushes(of: app)
                return pushes.map(\.state) == [.dropped, .queued, .replaced, .delivered]
                    && pushes[1].reasonCode == .pushThrottled
            }
            // bgctl why says which pushes wait, until when, and which will never wake the app.
            // Times in local time (UTC here), with the date: bgd's virtual day is not today.
            let why = try await Command.run(
                try BuiltProducts.path(of: "bgctl"), ["why", Self.app, "--socket", daemon.socketPath],
                environment: ProcessInfo.processInfo.environment.merging(["TZ": "UTC"]) { $1 })
            #expect(why.status == 0, "\(why.standardError)")
            for expected in [
                "background pushes waiting", "pushThrottled: held until 2026-01-05 09:20 UTC (", "pushExpired",
                "pushReplaced",
            ] {
                #expect(why.standardOutput.contains(expected), "\(expected) in \(why.standardOutput)")
            }
            // 20 minutes on, the next wake is allowed: the newest waiting push goes.
            _ = try await daemon.waitForRunEnd(of: Self.app) { daemon.clock.advance(by: .seconds(1200)) }
            #expect(log(daemon) == ["push 1", "push 3"])
            let pushes = try await daemon.store.pushes(of: app)
            #expect(pushes.map(\.state) == [.dropped, .delivered, .replaced, .delivered])
            #expect(pushes[0].reasonCode == .pushExpired && pushes[0].reason?.contains("apns-expiration") == true)
            #expect(pushes[2].reasonCode == .pushReplaced && pushes[3].reasonCode == .pushWake)
            let logged = try await Command.run(
                try BuiltProducts.path(of: "bgctl"), ["push", "log", Self.app, "--socket", daemon.socketPath])
            #expect(
                logged.status == 0 && logged.standardOutput.contains("pushReplaced")
                    && logged.standardOutput.contains("pushExpired"), "\(logged.standardOutput)")
        }
    }

    /// Held pushes go oldest collapse id first, so none waits for ever behind one a provider
    /// keeps sending (before, the newest went first: "news" every 20 minutes held "mail" back
    /// for good). And a now-or-never push that cannot go replaces nothing: before, it took the
    /// place of a held push of its collapse id, and then was dropped itself — neither came.
    @Test func heldPushesTakeTurnsAndANowOrNeverPushReplacesNothing() async throws {
        try await withGateway(command: try fixture(), throttle: PushThrottle(wakesPerHour: 3, burst: 1)) {
            provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            let app = AppID(rawValue: Self.app)!
            func push(_ id: Int, _ headers: [(String, String)] = []) async throws {
                let answer = try await provider.send(
                    token: token, headers: headers, body: #"{"aps":{"content-available":1},"content-id":\#(id)}"#)
                #expect(answer.status == 200)
            }
            _ = try await daemon.waitForRunEnd(of: Self.app) { try await push(1) }
            try await push(2, [("apns-collapse-id", "mail")])
            try await push(3, [("apns-collapse-id", "news")])
            try await push(4, [("apns-collapse-id", "mail"), ("apns-expiration", "0")])
            try await daemon.waitUntil {
                try await daemon.store.pushes(of: app).first?.state == .dropped
            }
            let states = try await daemon.store.pushes(of: app).map(\.state)
            #expect(states == [.dropped, .queued, .queued, .delivered], "\(states)")
            _ = try await daemon.waitForRunEnd(of: Self.app) { daemon.clock.advance(by: .seconds(1200)) }
            try await push(5, [("apns-collapse-id", "news")])
            _ = try await daemon.waitForRunEnd(of: Self.app) { daemon.clock.advance(by: .seconds(1200)) }
            #expect(log(daemon) == ["push 1", "push 2", "push 5"])
        }
    }

    /// An unregistered app's pushes go with it. Before, one left queued was tried again at
    /// every pass once its wake was allowed, the store refused it (no such app) and the pass
    /// failed: no app after it in name order was woken for a push again.
    @Test func anUnregisteredAppsPushesGoWithItAndHoldUpNoOther() async throws {
        try await withGateway(command: try fixture(), throttle: PushThrottle(wakesPerHour: 3, burst: 1)) {
            provider, daemon, tokenOf in
            // `other` sorts before the app: its push is looked at first at every pass.
            let (otherToken, token) = (try await tokenOf(Self.other), try await tokenOf(Self.app))
            let background = [("apns-topic", Self.other)]
            _ = try await daemon.waitForRunEnd(of: Self.other) {
                let answer = try await provider.send(token: otherToken, headers: background)
                #expect(answer.status == 200)
            }
            #expect(try await provider.send(token: otherToken, headers: background).status == 200)
            let other = AppID(rawValue: Self.other)!
            try await daemon.waitUntil { try await daemon.store.pushes(of: other).contains { $0.state == .queued } }

            let removed = try await RawHTTP.request(daemon.socketPath, .DELETE, "/v1/apps/\(Self.other)")
            #expect(removed.status == 200 || removed.status == 204, "\(removed)")
            #expect(try await daemon.store.pushes(of: other).isEmpty)
            daemon.clock.advance(by: .seconds(1200))  // the wake its push waited for is allowed now
            let run = try await daemon.waitForRunEnd(of: Self.app) {
                let answer = try await provider.send(token: token)
                #expect(answer.status == 200)
            }
            #expect(run.trigger == .remoteNotification, "\(run)")
        }
    }

    /// bgctl signs its provider token with the real time when it starts, and bgd refuses one
    /// issued more than 60 s ahead of its (here virtual) clock. Under the whole suite's load a
    /// test reaches its sends minutes after its clock was set, and starting bgctl itself has
    /// taken over a minute: bgd's clock is moved to 50 s past the real now before each send, so
    /// the token's time is within a minute of it either way.
    static func keepUpWithRealTime(_ clock: ManualClock) {
        clock.advance(to: max(clock.now, SystemClock().now.addingTimeInterval(50)))
    }

    /// `bgctl push send`: a provider's request through the real gateway, signed with a .p8.
    @Test func bgctlPushSendGoesThroughTheGateway() async throws {
        // bgctl signs with the real time, so bgd's virtual clock starts there.
        try await withGateway(now: SystemClock().now) { provider, daemon, tokenOf in
            let keyFile = daemon.directory + "/AuthKey.p8"
            try provider.key.pemRepresentation.write(toFile: keyFile, atomically: true, encoding: .utf8)
            let payload = daemon.directory + "/payload.json"
            try #"{"aps":{"content-available":1},"content-id":7}"#.write(
                toFile: payload, atomically: true, encoding: .utf8)
            // No --gateway: bgctl asks bgd where its gateway listens (a free port here, not 2197).
            // bgctl keeps its provider token between runs, as APNs asks; a fresh cache per test.
            let cache = ["XDG_CACHE_HOME": daemon.directory + "/cache"]
            func send(
                _ extra: [String] = [], keyID: String = Self.keyID, teamID: String = Self.teamID
            ) async throws -> Command.Output {
                Self.keepUpWithRealTime(daemon.clock)
                return try await Command.run(
                    try BuiltProducts.path(of: "bgctl"),
                    [
                        "push", "send", Self.app, payload, "--key", keyFile, "--key-id", keyID, "--team-id",
                        teamID,
                        "--socket", daemon.socketPath,
                    ] + extra,
                    environment: ProcessInfo.processInfo.environment.merging(cache) { $1 })
            }
            // Sending makes no device token: an app that has none is said to have none.
            let noToken = try await send()
            #expect(
                noToken.status == 3 && noToken.standardError.contains("has no device token")
                    && noToken.standardError.contains("bgctl push token \(Self.app) --create"),
                "\(noToken.standardError)")
            _ = try await tokenOf(Self.app)  // as the app registering for pushes makes it
            let sent = try await send()
            #expect(
                sent.status == 0 && sent.standardOutput.contains("200 accepted"),
                "\(sent.standardOutput) \(sent.standardError)")
            // A mistyped team id is refused, and does not cost the right one its token: bgd took
            // that one less than 20 minutes ago and takes it again (a new one would be 429).
            let wrongTeam = try await send(teamID: "WRONGTEAM1")
            #expect(
                wrongTeam.status == 77 && wrongTeam.standardError.contains("InvalidProviderToken"),
                "\(wrongTeam.standardError)")
            let again = try await send()
            #expect(again.status == 0, "\(again.standardError)")
            // Under --json a refusal is a failure all the same: its status, and the error as
            // JSON on stderr (it exited 0 with the answer on stdout).
            let wrongTeamJSON = try await send(["--json"], teamID: "WRONGTEAM1")
            #expect(
                wrongTeamJSON.status == 77 && wrongTeamJSON.standardOutput.isEmpty
                    && wrongTeamJSON.standardError.contains(#""error""#)
                    && wrongTeamJSON.standardError.contains("InvalidProviderToken"), "\(wrongTeamJSON)")
            let acceptedJSON = try await send(["--json"])
            #expect(acceptedJSON.status == 0 && acceptedJSON.standardOutput.contains("200"), "\(acceptedJSON)")
            let refused = try await send(["--priority", "10"])
            #expect(refused.status == 65 && refused.standardError.contains("BadPriority"), "\(refused.standardError)")
            // The status and reason first, then what to check.
            let unknownKey = try await send(keyID: "ZZZZZZZZZZ")
            #expect(
                unknownKey.status == 77
                    && unknownKey.standardError.contains("403 InvalidProviderToken: the key id, team id and key")
                    && unknownKey.standardError.contains("bgctl push keys"), "\(unknownKey.standardError)")
            // Each refusal a provider under test meets most names what to check.
            let noSuchDevice = try await send(["--token", String(repeating: "ab", count: 32)])
            #expect(
                noSuchDevice.standardError.contains("BadDeviceToken: no app has this device token")
                    && noSuchDevice.standardError.contains("bgctl push token"), "\(noSuchDevice.standardError)")
            let notAToken = try await send(["--token", "ab cd"])
            #expect(
                notAToken.status == 64 && notAToken.standardError.contains("hexadecimal"), "\(notAToken.standardError)")
            let large = daemon.directory + "/large.json"
            try (#"{"aps":{"content-available":1},"pad":""# + String(repeating: "x", count: 4200) + #""}"#).write(
                toFile: large, atomically: true, encoding: .utf8)
            let tooLarge = try await Command.run(
                try BuiltProducts.path(of: "bgctl"),
                [
                    "push", "send", Self.app, large, "--key", keyFile, "--key-id", Self.keyID, "--team-id", Self.teamID,
                    "--socket", daemon.socketPath,
                ], environment: ProcessInfo.processInfo.environment.merging(cache) { $1 })
            #expect(
                tooLarge.standardError.contains("413 PayloadTooLarge: a payload is at most 4096 bytes"),
                "\(tooLarge.standardError)")
            // Nothing listening: said in words, not SwiftNIO's description of its attempts.
            let refusedConnection = try await send(["--gateway", "https://127.0.0.1:1"])
            #expect(
                refusedConnection.status == 69
                    && refusedConnection.standardError.contains(
                        "cannot connect to https://127.0.0.1:1: connection refused — is bgd's push gateway listening there?"
                    )
                    && !refusedConnection.standardError.contains("SingleConnectionFailure"),
                "\(refusedConnection.standardError)")
            let noCertificate = try await send(["--certificate", daemon.directory + "/none.crt"])
            #expect(
                noCertificate.status == 66
                    && noCertificate.standardError.contains("no such file: \(daemon.directory)/none.crt"),
                "\(noCertificate.standardError)")
            // The gateway's URL with a slash after it is the same gateway.
            let gateway = try #require(
                try await daemon.admin.send(.get, "/v1/status", as: DaemonStatus.self).pushGateway)
            let slash = try await send(["--gateway", gateway + "/"])
            #expect(slash.status == 0, "\(slash.standardError)")
            // A certificate that is not the gateway's: said so, with what to pass.
            _ = try GatewayCertificate.loadOrCreate(in: daemon.directory + "/other", now: Date())
            let untrusted = try await send(["--certificate", daemon.directory + "/other/push-gateway.crt"])
            #expect(
                untrusted.status == 69
                    && untrusted.standardError.contains("its certificate is not one this machine trusts")
                    && untrusted.standardError.contains("--certificate FILE"), "\(untrusted.standardError)")
            #expect(
                try await daemon.store.pushes(of: AppID(rawValue: Self.app)!).count == 4,
                "the first send, the one after the mistyped team, the one with --json and the one with a slash")
        }
    }

    /// Seed 004's sample: a push with content-id 5 wakes PushNews, which fetches item 5 and answers newData.
    @Test func pushNewsFetchesTheItemThePushNames() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        let template = origin.baseURL.absoluteString + "/files/{id}/2000"
        try await withGateway(command: [try BuiltProducts.path(of: "PushNews"), "--url", template]) {
            provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            let run = try await daemon.waitForRunEnd(of: Self.app) {
                let answer = try await provider.send(
                    token: token, body: #"{"aps":{"content-available":1},"content-id":5}"#)
                #expect(answer.status == 200)
            }
            #expect(run.outcome == .newData, "\(run)")
            let item = try Data(
                contentsOf: URL(fileURLWithPath: daemon.directory + "/state/containers/\(Self.app)/items/5"))
            #expect(FaultyOrigin.sha256Digest(of: item) == FaultyOrigin.sha256(seed: 5, size: 2000))
        }
    }

    /// A running (connected) app gets the push live, without a launch.
    @Test func aPushReachesARunningApp() async throws {
        try await withGateway { provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            let received = ReceivedPushes()
            let application = BackgroundApplication(
                appID: AppID(rawValue: Self.app)!, token: provider.appToken, socketPath: daemon.socketPath)
            application.onRemoteNotification { notification in
                received.append(notification.json)
                return .newData
            }
            var connection: Task<Void, any Error>?
            _ = try await daemon.waitFor(
                { activity -> Bool? in
                    if case .appConnected(let app) = activity, app.rawValue == Self.app { return true }
                    return nil
                }, after: { connection = Task { try await application.run() } })
            defer { connection?.cancel() }
            let launched = ReceivedPushes()
            let run = try await daemon.waitFor(
                { activity -> RunRecord? in
                    if case .processLaunched = activity { launched.append("launched") }
                    if case .runEnded(let run) = activity, run.app.rawValue == Self.app { return run }
                    return nil
                },
                after: {
                    let status = try await provider.send(token: token).status
                    #expect(status == 200)
                })
            #expect(run.outcome == .newData && launched.all.isEmpty, "\(run)")
            #expect(received.all.first?.contains("content-id") == true)
        }
    }

    /// A 200 means durably queued: a push held by the throttle is still there after bgd restarts,
    /// still held (the app's allowance was saved with its last wake), and goes when the next
    /// wake is allowed.
    @Test func aRestartKeepsQueuedPushesAndTheAllowance() async throws {
        let directory = TemporaryDirectory.make()
        let start = Date(timeIntervalSince1970: 1_767_603_600)
        let app = AppID(rawValue: Self.app)!
        try await withGateway(
            command: try fixture(), throttle: PushThrottle(wakesPerHour: 1, burst: 1), now: start, directory: directory
        ) { provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            _ = try await daemon.waitForRunEnd(of: Self.app) { _ = try await provider.send(token: token) }
            let status = try await provider.send(token: token, body: #"{"aps":{"content-available":1},"content-id":2}"#)
                .status
            #expect(status == 200)
            try await daemon.waitUntil { try await daemon.store.pushes(of: app).first?.reasonCode == .pushThrottled }
        }
        let clock = ManualClock(now: start.addingTimeInterval(100))
        try await TestDaemon.with(
            clock: clock, directory: directory, push: .init(port: 0, throttle: PushThrottle(wakesPerHour: 1, burst: 1))
        ) { daemon in
            try await daemon.waitUntil {
                try await daemon.store.pushes(of: app).first?.reason?.contains("held until 2026-01-05T10:00:00Z")
                    == true
            }
            #expect(try await daemon.store.runsInFlight().isEmpty)
            _ = try await daemon.waitForRunEnd(of: Self.app) { clock.advance(by: .seconds(3500)) }
            #expect(try await daemon.store.pushes(of: app).map(\.state) == [.delivered, .delivered])
            #expect(
                Self.lines(ofFixtureLog: directory + "/state/containers/\(Self.app)/fixture.log") == [
                    "push 42", "push 2",
                ])
        }
    }

    /// A provider flooding one device token is told 429 TooManyRequests; nothing of the flood
    /// beyond the allowance is queued, and another token is not affected.
    @Test func aFloodToOneTokenIsToldToBackOff() async throws {
        try await withGateway(floodLimit: PushFloodLimit(perSecond: 0.01, burst: 3)) { provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            var statuses: [String] = []
            for _ in 0..<5 {
                let answer = try await provider.send(token: token)
                statuses.append("\(answer.status) \(answer.reason ?? "-")")
            }
            #expect(statuses == ["200 -", "200 -", "200 -", "429 TooManyRequests", "429 TooManyRequests"])
            #expect(try await daemon.store.pushes(of: AppID(rawValue: Self.app)!).count == 3)
            let other = try await provider.send(
                token: try await tokenOf(Self.other), headers: [("apns-topic", Self.other)])
            #expect(other.status == 200)
            // The allowance refills with time (the gateway reads the daemon's clock).
            daemon.clock.advance(by: .seconds(100))
            #expect(try await provider.send(token: token).status == 200)
        }
    }

    /// The gateway keeps provider keys in memory; removing one refuses its tokens from the next
    /// request on, and adding it back lets them in again.
    @Test func aRemovedKeyIsRefusedAtOnce() async throws {
        try await withGateway { provider, daemon, tokenOf in
            let token = try await tokenOf(Self.app)
            #expect(try await provider.send(token: token).status == 200)
            let removed = try await Command.run(
                try BuiltProducts.path(of: "bgctl"),
                ["push", "keys", "remove", Self.keyID, "--socket", daemon.socketPath])
            #expect(removed.status == 0, "\(removed.standardError)")
            let refused = try await provider.send(token: token)
            #expect(refused.status == 403 && refused.reason == "InvalidProviderToken")
            _ = try await daemon.admin.send(
                .post, "/v1/push/keys",
                body: ProviderKeyRegistration(
                    keyID: Self.keyID, teamID: Self.teamID, topics: [Self.app],
                    publicKeyPEM: provider.key.publicKey.pemRepresentation),
                as: ProviderKeyRegistration.self)
            #expect(try await provider.send(token: token).status == 200)
        }
    }
}

final class ReceivedPushes: Sendable {
    private let items = Mutex<[String]>([])
    func append(_ item: String) { items.withLock { $0.append(item) } }
    var all: [String] { items.withLock { $0 } }
}
