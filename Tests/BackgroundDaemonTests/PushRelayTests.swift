import AsyncHTTPClient
import BackgroundDaemon
import BackgroundGateway
import BackgroundModel
import BackgroundPolicy
import BackgroundRelay
import BackgroundTesting
import Crypto
import Foundation
import Synchronization
import Testing

/// The push relay (issue 19): a provider talks the APNs provider API to bgrelay, and a device —
/// a real bgd, or a hand-driven uplink — connects out to it and receives its pushes, each once.
@Suite(.timeLimit(.minutes(5)))
struct PushRelayTests {
    static let app = PushGatewayTests.app

    /// A provider for the relay's provider port, signing with `key`.
    func provider(_ node: RelayNode, client: HTTPClient, key: P256.Signing.PrivateKey) -> PushGatewayTests.Provider {
        PushGatewayTests.Provider(client: client, base: node.providerURL, key: key, now: SystemClock().now)
    }

    /// A relay node, a provider with a key for the app, and a device enrolled by hand (its token
    /// registered if `token` is given).
    struct Device: @unchecked Sendable {  // the provider's key is only read
        let node: RelayNode
        let client: HTTPClient
        let provider: PushGatewayTests.Provider
        let enrollment: RelayEnrollment

        func connect() async throws -> RawUplink {
            try await RawUplink.connect(node, client: client, enrollment: enrollment)
        }
    }

    /// The relay runs on `clock` with `uplinkSilence`, `uplinkWriteLimit` and `deviceLimit` (see
    /// `RelayNode.with`).
    func withDevice(
        registering token: String? = nil, clock: any WallClock = SystemClock(), uplinkSilence: Duration = .seconds(900),
        uplinkWriteLimit: Duration? = nil, deviceLimit: PushFloodLimit = PushFloodLimit(),
        _ body: @Sendable (Device) async throws -> Void
    ) async throws {
        try await RelayNode.with(
            deviceLimit: deviceLimit, clock: clock, uplinkSilence: uplinkSilence, uplinkWriteLimit: uplinkWriteLimit
        ) { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            let key = P256.Signing.PrivateKey()
            try await node.addProviderKey(key, topics: [Self.app])
            let enrollment = try await RawUplink.enroll(node, client: client)
            if let token {
                try await node.store.register(
                    token: token, topic: Self.app, device: enrollment.device, now: SystemClock().now)
            }
            try await body(
                Device(
                    node: node, client: client, provider: provider(node, client: client, key: key),
                    enrollment: enrollment))
        }
    }

    @Test func aPushThroughTheRelayWakesTheAppOnce() async throws {
        try await withDaemonOnARelay { node, client, key, daemon in
            _ = try await daemon.register(
                Self.app, command: try PushGatewayTests().fixture(), interval: .never)
            let token = try await daemon.admin.send(
                .post, "/v1/apps/\(Self.app)/push/token", as: DeviceTokenInfo.self
            ).token
            // bgd enrolled itself, connected out, and named the token.
            #expect(try await node.eventually { try await node.store.tokenOwner(token) != nil })
            let status = try await daemon.admin.send(.get, "/v1/push/relay", as: PushRelayStatus.self)
            #expect(status.url == node.uplinkURL && status.device != nil, "\(status)")
            let credential = daemon.directory + "/state/push-relay.json"
            let mode = try FileManager.default.attributesOfItem(atPath: credential)[.posixPermissions] as? Int
            #expect(mode == 0o600)

            let id = "0a3c9e52-7e4b-4d1a-9a55-1f2b3c4d5e6f"
            let run = try await daemon.waitForRunEnd(of: Self.app) {
                let answer = try await provider(node, client: client, key: key).send(
                    token: token, headers: [("apns-id", id)])
                #expect(answer.status == 200 && answer.apnsID == id, "\(answer)")
            }
            #expect(run.trigger == .remoteNotification && run.outcome == .newData, "\(run)")
            #expect(try await node.eventually { try await node.store.pushLog().map(\.state) == [.delivered] })
            let pushes = try await daemon.store.pushes(of: AppID(rawValue: Self.app)!)
            #expect(pushes.map(\.apnsID) == [id])
            let received = try await daemon.admin.send(.get, "/v1/push/relay", as: PushRelayStatus.self)
            #expect(received.state == .connected && received.received == 1, "\(received)")
            #expect(received.transport == "lines", "bgd holds the uplink as lines on TLS: \(received)")
        }
    }

    /// A device that does not acknowledge is sent at most 1,024 pushes ahead (the session's
    /// cap), and the rest as acknowledgements make room, oldest first.
    @Test func aSessionSendsNoMoreThanItsCapAheadOfTheAcknowledgements() async throws {
        try await RelayNode.with(deviceLimit: PushFloodLimit(perSecond: 100_000, burst: 100_000)) { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            nonisolated(unsafe) let key = P256.Signing.PrivateKey()
            try await node.addProviderKey(key, topics: [Self.app])
            let device = try await RawUplink.enroll(node, client: client)
            let uplink = try await RawLineUplink.connect(node, first: device.bearer + "\n")
            #expect(await uplink.next() == .ready(device: device.device))
            let token = String(repeating: "78", count: 32)
            uplink.send(.register(token: token, topic: Self.app))
            #expect(try await node.eventually { try await node.store.tokenOwner(token) != nil })
            let sender = provider(node, client: client, key: key)
            for _ in 0..<1_300 { _ = try await sender.send(token: token) }

            var seqs: [Int64] = []
            while seqs.count < 1_024, case .push(let push)? = await uplink.next() { seqs.append(push.seq) }
            #expect(seqs.count == 1_024)
            // Nothing more comes before acknowledgements: the next line is this keep-alive's echo.
            uplink.sendLine("")
            #expect(await uplink.nextLine() == "")
            for seq in seqs { uplink.send(.ack(seq: seq)) }
            while seqs.count < 1_300, case .push(let push)? = await uplink.next() {
                seqs.append(push.seq)
                uplink.send(.ack(seq: push.seq))
            }
            #expect(seqs.count == 1_300 && seqs == seqs.sorted() && Set(seqs).count == 1_300)
            #expect(try await node.eventually { try await node.store.pushCounts()[.pending] == nil })
            uplink.close()
        }
    }

    /// A relay that offers no lines (one from before them): bgd holds an HTTP/2 stream instead,
    /// and a push reaches the app the same way.
    @Test func bgdHoldsAnHTTP2StreamWithARelayThatOffersNoLines() async throws {
        try await withDaemonOnARelay(offersLines: false) { node, client, key, daemon in
            _ = try await daemon.register(Self.app, command: try PushGatewayTests().fixture(), interval: .never)
            let token = try await daemon.admin.send(
                .post, "/v1/apps/\(Self.app)/push/token", as: DeviceTokenInfo.self
            ).token
            #expect(try await node.eventually { try await node.store.tokenOwner(token) != nil })
            let run = try await daemon.waitForRunEnd(of: Self.app) {
                let answer = try await provider(node, client: client, key: key).send(token: token)
                #expect(answer.status == 200, "\(answer)")
            }
            #expect(run.trigger == .remoteNotification, "\(run)")
            let status = try await daemon.admin.send(.get, "/v1/push/relay", as: PushRelayStatus.self)
            #expect(status.state == .connected && status.transport == "http2" && status.received == 1, "\(status)")
        }
    }

    /// The uplink as lines on TLS, by hand: the first line is the credential — anything else
    /// ends the connection with `closing unauthorized`, a line longer than any credential
    /// closes it unanswered — then the frames are those of the HTTP/2 stream, keep-alives
    /// echoed, bad frames refused, pushes sent and acknowledged.
    @Test func theLineUplinkTakesACredentialFirstAndThenTheStreamsFrames() async throws {
        try await RelayNode.with { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            nonisolated(unsafe) let key = P256.Signing.PrivateKey()
            try await node.addProviderKey(key, topics: [Self.app])
            let a = try await RawUplink.enroll(node, client: client)
            let b = try await RawUplink.enroll(node, client: client)
            for credential in ["", "Bearer \(a.device).\(b.secret)", "Bearer nonsense", "Basic abc"] {
                let refused = try await RawLineUplink.connect(node, first: credential + "\n")
                #expect(await refused.next().map(Self.code) == "unauthorized", "\(credential)")
                #expect(await refused.nextLine() == nil, "closed after refusing \(credential)")
            }
            // Closed at once, not at the credential's deadline (the handshake timeout, 10 s).
            let clock = SystemClock()
            let sentLong = clock.now
            let long = try await RawLineUplink.connect(node, first: String(repeating: "B", count: 600))
            #expect(await long.nextLine() == nil, "a first line longer than a credential is not read to its end")
            // Under 8 s, not 5: the time includes the TLS handshake, which took 7 s once under CI's
            // load; the deadline would close it after 10.
            #expect(clock.now.timeIntervalSince(sentLong) < 8, "closed for its length, not by the deadline")

            // A credential in two writes is still one line.
            let uplink = try await RawLineUplink.connect(node, first: String(a.bearer.prefix(10)))
            uplink.sendLine(String(a.bearer.dropFirst(10)))
            #expect(await uplink.next() == .ready(device: a.device))
            uplink.sendLine("")
            #expect(await uplink.nextLine() == "", "a keep-alive is echoed")
            uplink.sendLine("not json")
            #expect(await uplink.next().map(Self.code) == "badFrame")
            let token = String(repeating: "56", count: 32)
            uplink.send(.register(token: token, topic: Self.app))
            #expect(try await node.eventually { try await node.store.tokenOwner(token)?.device == a.device })
            #expect(try await provider(node, client: client, key: key).send(token: token).status == 200)
            #expect(try await uplink.acknowledgesThePush(on: node), "no push came down the line uplink")
            uplink.close()
        }
    }

    /// A device that closes its line uplink — TLS close_notify, then its socket, as bgd does when
    /// it stops — ends its session at once, on either close: the relay's server allows half
    /// closure, so neither makes the connection inactive. Before, the session lived on until the
    /// silence check (15 minutes), and the device counted as connected meanwhile.
    @Test func aDeviceThatClosesItsLineUplinkEndsItsSessionAtOnce() async throws {
        try await RelayNode.with { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            let device = try await RawUplink.enroll(node, client: client)
            let uplink = try await RawLineUplink.connect(node, first: device.bearer + "\n")
            #expect(await uplink.next() == .ready(device: device.device))
            #expect(try await node.metrics(client: client)["bgrelay_connected_devices"] == 1)
            uplink.close()
            #expect(
                try await node.eventually { try await node.metrics(client: client)["bgrelay_connected_devices"] == 0 },
                "the session outlived its connection")
        }
    }

    /// A connection that sends the device's credential and closes at once (a stray copy of the
    /// credential, a probe, bgd stopped while it connected) takes nothing: the device's live
    /// uplink goes on. Before, it took the device over — the live session was told `superseded`,
    /// which bgd backs off from — and then ended in its first round, leaving the device with no
    /// session on the node, where a push sent `apns-expiration: 0` was dropped.
    @Test func aConnectionThatAuthenticatesAndClosesTakesNothingOver() async throws {
        let token = String(repeating: "e2", count: 32)
        try await withDevice(registering: token) { device in
            let (node, client) = (device.node, device.client)
            let live = try await RawLineUplink.connect(node, first: device.enrollment.bearer + "\n")
            #expect(await live.next() == .ready(device: device.enrollment.device))
            let stray = try await RawLineUplink.connect(
                node, first: device.enrollment.bearer + "\n", thenCloseOutput: true)
            // The relay is done with the stray once it has closed the connection.
            var strayHeard: [String] = []
            while let line = await stray.nextLine() { strayHeard.append(line) }
            #expect(strayHeard.isEmpty, "\(strayHeard)")
            // The live uplink echoes a keep-alive: it was not told it is superseded.
            live.sendLine("")
            #expect(await live.nextLine() == "")
            #expect(try await node.metrics(client: client)["bgrelay_connected_devices"] == 1)
            // A push that must go now or never goes to it.
            let answer = try await device.provider.send(token: token, headers: [("apns-expiration", "0")])
            #expect(answer.status == 200)
            #expect(try await live.acknowledgesThePush(on: node), "the live uplink got no push")
            live.close()
        }
    }

    /// A device that stops reading (hung, its socket never drained) holds its session's write.
    /// Before, a held-up session read nothing more — not the silence check's `silent`, not the
    /// device's next uplink taking over, not its FIN — so it never ended, and each such
    /// connection held a slot of the connection limits for good. A write waiting
    /// `--uplink-silence` now cuts the connection, and the device's next uplink is served.
    @Test func anUplinkWhoseDeviceReadsNothingIsCutAndTheDeviceConnectsAgain() async throws {
        let clock = ManualClock(now: SystemClock().now)
        let token = String(repeating: "e1", count: 32)
        // The silence check kept out of it: a session busy writing (not yet held up) would
        // otherwise be closed as silent under load (seen in CI).
        try await withDevice(
            registering: token, clock: clock, uplinkSilence: .seconds(86400), uplinkWriteLimit: .seconds(4),
            deviceLimit: PushFloodLimit(perSecond: 1, burst: 10_000)
        ) { device in
            let (node, client) = (device.node, device.client)
            let stuck = try await RawLineUplink.connect(
                node, first: device.enrollment.bearer + "\n", receiveBuffer: 4_096)
            #expect(await stuck.next() == .ready(device: device.enrollment.device))
            try await stuck.stopReading()
            // As many pushes of 4 KB as a token keeps pending (4 MB), which the device never
            // takes: the sockets' buffers fill, and a write of the session waits. (A flood of
            // lines the relay refuses, 130 bytes an answer, took minutes of real time under CI's
            // load.)
            let payload = #"{"aps":{"content-available":1},"pad":"\#(String(repeating: "x", count: 3_900))"}"#
            var accepted = 0
            for _ in 0..<1_000 {
                let answer = try await device.provider.send(token: token, body: payload)
                if answer.status == 200 { accepted += 1 }
            }
            #expect(accepted == 1_000)
            let seconds = try await node.secondsUntilAStalledUplinkIsCut(moving: clock, client: client)
            #expect(seconds != nil, "the stalled uplink was not cut")
            guard seconds != nil else { return stuck.close() }
            #expect(
                try await node.eventually { try await node.metrics(client: client)["bgrelay_connected_devices"] == 0 },
                "the cut session is still connected")
            stuck.close()
            let again = try await RawLineUplink.connect(node, first: device.enrollment.bearer + "\n")
            #expect(await again.next() == .ready(device: device.enrollment.device))
            // It is sent what the stuck one never acknowledged.
            guard case .push(let first) = await again.next() else {
                Issue.record("the new uplink was sent no push")
                return again.close()
            }
            again.send(.ack(seq: first.seq))
            #expect(try await node.eventually { try await node.store.pushCounts()[.delivered] == 1 })
            again.close()
            #expect(
                try await node.eventually { try await node.metrics(client: client)["bgrelay_connected_devices"] == 0 })
        }
    }

    /// The same over HTTP/2: a device (Python's h2, from the interop venv) that grants the relay
    /// no flow-control window holds the session's write on its stream. After `--uplink-silence`
    /// the connection is cut (a reset of the stream alone would wait behind what a device that
    /// reads nothing at all never takes), and the session ends.
    @Test(
        .enabled(
            if: FileManager.default.isExecutableFile(atPath: PushInteropTests.python),
            "needs the interop venv: run Tests/Interop/setup.sh (CI does)"))
    func anHTTP2UplinkWhoseDeviceReadsNothingIsCut() async throws {
        let clock = ManualClock(now: SystemClock().now)
        try await RelayNode.with(clock: clock, uplinkSilence: .seconds(4)) { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            let device = try await RawUplink.enroll(node, client: client)
            let stalled = try Spawned(
                PushInteropTests.python,
                [
                    PushInteropTests.root + "/Tests/Interop/stalled_uplink_device.py", "localhost",
                    String(node.uplinkPort), node.certificatePath, device.bearer,
                ], mergeErrors: true)
            let said = OutputWatcher(stalled.output)
            // Only then does the relay's time move: its write waits, so the silence check's
            // `silent` goes unread, as a takeover would.
            #expect(await said.wait(for: "stalled"), "the relay's writes did not fill the window: \(said.text)")
            let cut = try await node.secondsUntilAStalledUplinkIsCut(moving: clock, client: client) != nil
            #expect(cut, "the stalled stream was not cut")
            if !cut { stalled.signal(SIGKILL) }
            #expect(await said.wait(for: "closed"), "the device's connection was not closed: \(said.text)")
            #expect(
                try await node.eventually { try await node.metrics(client: client)["bgrelay_connected_devices"] == 0 },
                "the cut session is still connected")
            stalled.signal(SIGKILL)
            _ = await stalled.waitForExit()
        }
    }

    /// A device gone without closing (wiped, its NAT mapping dropped) sends nothing, not even a
    /// keep-alive: the relay closes its uplink after `--uplink-silence` — over lines and over
    /// HTTP/2 alike — and counts it, while a device that keeps talking keeps its uplink. Before,
    /// such a connection held its slot of `--max-devices` for good, and kept its device "seen".
    @Test func anUplinkTheDeviceWentSilentOnIsClosedAndOneThatTalksIsNot() async throws {
        // The relay's time is the test's: its looks (every 2 s of a 4 s limit) and the closing's
        // grace come as the test moves the clock, one second after each keep-alive of the
        // talking device — so that one is never silent for more than a second.
        let clock = ManualClock(now: SystemClock().now)
        try await RelayNode.with(clock: clock, uplinkSilence: .seconds(4)) { node in
            let client = node.client()
            let (talking, silentLine, silentStream) = (
                try await RawUplink.enroll(node, client: client), try await RawUplink.enroll(node, client: client),
                try await RawUplink.enroll(node, client: client)
            )
            let alive = try await RawLineUplink.connect(node, first: talking.bearer + "\n")
            #expect(await alive.next() == .ready(device: talking.device))
            let line = try await RawLineUplink.connect(node, first: silentLine.bearer + "\n")
            #expect(await line.next() == .ready(device: silentLine.device))
            let stream = try await RawUplink.connect(node, client: client, enrollment: silentStream)
            #expect(await stream.next() == .ready(device: silentStream.device))

            // The silent two hear why, then are hung up on.
            let ended = Mutex(false)
            let lastWords = Task { () -> (said: [String?], after: [String?]) in
                defer { ended.withLock { $0 = true } }
                let said = [await line.next().flatMap(Self.code), await stream.next().flatMap(Self.code)]
                // As bgd does on a closing: ends its side. (AsyncHTTPClient 1.37 traps when the
                // server ends a response whose request still streams and then resets the stream.)
                stream.close()
                return (said, [await line.nextLine(), await stream.nextLine()])
            }
            var (echoes, heardBack) = (0, true)
            while !ended.withLock({ $0 }) && heardBack && echoes < 10_000 {
                alive.sendLine("")
                heardBack = await alive.nextLine() == ""
                echoes += 1
                clock.advance(by: .seconds(1))
            }
            if !ended.withLock({ $0 }) {
                line.close()
                stream.close()
            }
            let (said, after) = await lastWords.value
            #expect(
                said == ["silent", "silent"] && after == [nil, nil], "the silent uplinks' last words: \(said) \(after)")
            #expect(heardBack, "the device that kept talking lost its uplink after \(echoes) keep-alives")
            #expect(
                try await node.eventually { try await node.metrics(client: client)["bgrelay_connected_devices"] == 1 })
            let metrics = try await node.metrics(client: client)
            #expect(metrics["bgrelay_uplinks_closed_silent_total"] == 2, "\(metrics)")
            alive.close()
            // Every connection closed before the node stops: its shutdown grace is on this clock.
            try await client.shutdown()
        }
    }

    /// A push the relay took just before the device's revocation reached it (another node, say)
    /// still reaches bgd, which no longer honours the token: it ends there as dropped, with why.
    @Test func aRelayedPushForATokenRevokedOnTheWayEndsRecordedAsDropped() async throws {
        try await RelayNode.with { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            nonisolated(unsafe) let key = P256.Signing.PrivateKey()
            try await node.addProviderKey(key, topics: [Self.app, PushGatewayTests.other])
            try await TestDaemon.with(
                clock: ManualClock(now: SystemClock().now),
                pushRelay: .init(url: node.uplinkURL, certificate: node.certificatePath)
            ) { daemon in
                var tokens: [String] = []
                for app in [Self.app, PushGatewayTests.other] {
                    _ = try await daemon.register(app, command: ["/bin/true"], interval: .never)
                    tokens.append(
                        try await daemon.admin.send(.post, "/v1/apps/\(app)/push/token", as: DeviceTokenInfo.self).token
                    )
                }
                #expect(try await node.eventually { try await node.store.tokenOwner(tokens[1]) != nil })
                let owner = try #require(try await node.store.tokenOwner(tokens[0]))
                // One push while the token counts: bgd reads its owner and keeps it, and must not
                // trust what it kept once the token is revoked. One provider token for both sends:
                // a second, minted a second later, would be refused as TooManyProviderTokenUpdates.
                let sender = provider(node, client: client, key: key)
                let first = try await sender.send(
                    token: tokens[0], headers: [("apns-topic", Self.app)])
                #expect(first.status == 200, "\(first)")
                #expect(try await node.eventually { try await node.store.pushCounts()[.delivered] == 1 })
                try await daemon.store.revokeDeviceTokens(of: AppID(rawValue: Self.app)!, now: daemon.clock.now)
                #expect(try await node.eventually { try await node.store.tokenOwner(tokens[0])?.revokedAt != nil })
                // Taken as if before the revocation: committed straight to the relay's store.
                let late = "5b1c2d3e-4f50-4a61-8b72-93a4b5c6d7e8"
                _ = try await node.store.commit(
                    [
                        AcceptedPush(
                            owner: owner,  // as it was before the revocation
                            deviceToken: tokens[0], apnsID: late, pushType: "background", priority: 5, collapseID: nil,
                            expiration: nil, payload: Data(#"{"aps":{"content-available":1}}"#.utf8))
                    ], now: SystemClock().now, connected: { _ in true })
                // A push to the other app rings the device, which is then sent both.
                let answer = try await sender.send(
                    token: tokens[1], headers: [("apns-topic", PushGatewayTests.other)])
                #expect(answer.status == 200, "\(answer)")
                #expect(try await node.eventually { try await node.store.pushCounts()[.delivered] == 3 })
                let recorded = try await daemon.store.pushes(of: AppID(rawValue: Self.app)!)
                #expect(recorded.count == 2 && recorded.map(\.apnsID).contains(late), "\(recorded)")
                let dropped = recorded.first { $0.apnsID == late }
                #expect(dropped?.state == .dropped && dropped?.reasonCode == .pushTokenRevoked, "\(recorded)")
                #expect(recorded.first { $0.apnsID != late }?.state != .dropped, "\(recorded)")
            }
        }
    }

    @Test func anOfflineDeviceGetsItsPushesInOrderCoalescedAndUnexpired() async throws {
        let token = String(repeating: "ab", count: 32)
        try await withDevice(registering: token) { device in
            let (node, provider, enrollment) = (device.node, device.provider, device.enrollment)
            let past = Int(SystemClock().now.timeIntervalSince1970) - 10
            let sent: [(String, [(String, String)])] = [
                ("first", []),
                ("news-1", [("apns-collapse-id", "news")]),
                ("expired", [("apns-expiration", "\(past)")]),
                ("now-or-never", [("apns-expiration", "0")]),
                ("news-2", [("apns-collapse-id", "news")]),
                ("last", []),
            ]
            for (name, headers) in sent {
                let answer = try await provider.send(
                    token: token, headers: headers, body: #"{"aps":{"content-available":1},"n":"\#(name)"}"#)
                #expect(answer.status == 200, "\(name): \(answer)")
            }
            let uplink = try await device.connect()
            #expect(await uplink.next() == .ready(device: enrollment.device))
            var names: [String] = []
            for _ in 0..<3 {
                guard case .push(let push) = await uplink.next() else { break }
                let payload = try JSONSerialization.jsonObject(with: push.payload) as? [String: Any]
                names.append(payload?["n"] as? String ?? "?")
                uplink.send(.ack(seq: push.seq))
            }
            #expect(names == ["first", "news-2", "last"])
            #expect(
                try await node.eventually {
                    try await node.store.pushLog().map(\.state)
                        == [.delivered, .replaced, .expired, .expired, .delivered, .delivered]
                })
            uplink.close()
        }
    }

    @Test func anUnacknowledgedPushIsSentAgainOnTheNextConnection() async throws {
        let token = String(repeating: "cd", count: 32)
        try await withDevice(registering: token) { device in
            let (node, enrollment) = (device.node, device.enrollment)
            let first = try await device.connect()
            #expect(await first.next() == .ready(device: enrollment.device))
            #expect(try await device.provider.send(token: token).status == 200)
            guard case .push(let push) = await first.next() else { Issue.record("no push"); return }
            first.close()  // gone before acknowledging
            let second = try await device.connect()
            #expect(await second.next() == .ready(device: enrollment.device))
            #expect(await second.next() == .push(push))
            second.send(.ack(seq: push.seq))
            second.send(.ack(seq: push.seq))  // repeated: no harm
            #expect(try await node.eventually { try await node.store.pushLog().map(\.state) == [.delivered] })
            second.close()
        }
    }

    /// `/metrics` on the uplink port: connected devices, provider answers, pushes by outcome,
    /// the queue's depth, delivery latency — and what the pruner ended, on a clock the test moves.
    @Test func theMetricsShowDevicesOutcomesQueueLatencyAndWhatThePrunerEnded() async throws {
        let clock = ManualClock()
        let token = String(repeating: "5e", count: 32)
        let hour = Duration.seconds(3600)
        try await RelayNode.with(
            clock: clock, retention: .init(holdPending: hour * 48, keepEnded: hour * 24, interval: hour)
        ) { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            let key = P256.Signing.PrivateKey()
            try await node.addProviderKey(key, topics: [Self.app])
            let provider = PushGatewayTests.Provider(client: client, base: node.providerURL, key: key, now: clock.now)
            let enrollment = try await RawUplink.enroll(node, client: client)
            try await node.store.register(token: token, topic: Self.app, device: enrollment.device, now: clock.now)
            // A device that enrolls and never connects.
            let stranger = try await RawUplink.enroll(node, client: client)
            func metrics() async throws -> [String: Double] { try await node.metrics(client: client) }

            // A push delivered while the device is connected.
            let uplink = try await RawUplink.connect(node, client: client, enrollment: enrollment)
            #expect(await uplink.next() == .ready(device: enrollment.device))
            #expect(try await metrics()["bgrelay_connected_devices"] == 1)
            #expect(try await provider.send(token: token).status == 200)
            guard case .push(let push) = await uplink.next() else { Issue.record("no push"); return }
            uplink.send(.ack(seq: push.seq))
            #expect(try await node.eventually { try await metrics()["bgrelay_delivery_seconds_count"] == 1 })
            uplink.close()
            #expect(try await node.eventually { try await metrics()["bgrelay_connected_devices"] == 0 })

            // Two waiting for it: one expires in an hour, one has no expiration.
            let inAnHour = String(Int(clock.now.timeIntervalSince1970) + 3600)
            #expect(try await provider.send(token: token, headers: [("apns-expiration", inAnHour)]).status == 200)
            #expect(try await provider.send(token: token).status == 200)
            #expect(try await provider.send(token: "00").status == 400)
            var shown = try await metrics()
            #expect(shown["bgrelay_queue_depth"] == 2)
            #expect(shown["bgrelay_pushes{outcome=\"delivered\"}"] == 1)
            #expect(shown["bgrelay_pushes{outcome=\"pending\"}"] == 2)
            #expect(shown["bgrelay_provider_requests_total{status=\"200\"}"] == 3)
            #expect(shown["bgrelay_provider_requests_total{status=\"400\"}"] == 1)
            #expect(shown["bgrelay_delivery_seconds_bucket{le=\"+Inf\"}"] == 1)
            #expect(shown["bgrelay_pruned_pushes_total{action=\"expired\"}"] == 0)

            // Two hours on, the pruner's next pass ends the first as expired; the other waits.
            clock.advance(by: hour * 2)
            #expect(
                try await node.eventually {
                    try await metrics()["bgrelay_pruned_pushes_total{action=\"expired\"}"] == 1
                })
            shown = try await metrics()
            #expect(shown["bgrelay_queue_depth"] == 1)
            #expect(shown["bgrelay_pushes{outcome=\"expired\"}"] == 1)
            #expect(shown["bgrelay_pruned_pushes_total{action=\"deleted\"}"] == 0)
            // A day on, the delivered one is forgotten.
            clock.advance(by: hour * 24)
            #expect(
                try await node.eventually {
                    try await metrics()["bgrelay_pruned_pushes_total{action=\"deleted\"}"] == 1
                })
            #expect(try await metrics()["bgrelay_pushes{outcome=\"delivered\"}"] == 0)
            #expect(try await metrics()["bgrelay_forgotten_devices_total"] == 0)
            // Past the 48-hour hold, the device that never connected is forgotten; the other stays.
            clock.advance(by: hour * 24)
            #expect(try await node.eventually { try await metrics()["bgrelay_forgotten_devices_total"] == 1 })
            #expect(try await node.store.authenticate(device: stranger.device, secret: stranger.secret) == false)
            #expect(try await node.store.authenticate(device: enrollment.device, secret: enrollment.secret))
        }
    }

    /// A device gone longer than `forgetDevices` is forgotten with its token (a provider's push
    /// to it answers 400 BadDeviceToken, as to one never registered); one whose uplink this node
    /// holds all the while is not, though it connected just as long ago.
    @Test func aDeviceGoneForMonthsIsForgottenAndOneStillConnectedIsNot() async throws {
        let clock = ManualClock()
        let hour = Duration.seconds(3600)
        let (goneToken, heldToken) = (String(repeating: "6a", count: 32), String(repeating: "6b", count: 32))
        try await RelayNode.with(
            clock: clock,
            retention: .init(holdPending: hour * 48, keepEnded: hour * 24, forgetDevices: hour * 72, interval: hour)
        ) { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            let key = P256.Signing.PrivateKey()
            try await node.addProviderKey(key, topics: [Self.app])
            func metrics() async throws -> [String: Double] { try await node.metrics(client: client) }
            var uplinks: [RawUplink] = []
            for token in [goneToken, heldToken] {
                let enrollment = try await RawUplink.enroll(node, client: client)
                try await node.store.register(token: token, topic: Self.app, device: enrollment.device, now: clock.now)
                let uplink = try await RawUplink.connect(node, client: client, enrollment: enrollment)
                #expect(await uplink.next() == .ready(device: enrollment.device))
                uplinks.append(uplink)
            }
            uplinks[0].close()
            #expect(try await node.eventually { try await metrics()["bgrelay_connected_devices"] == 1 })

            clock.advance(by: hour * 73)
            #expect(try await node.eventually { try await metrics()["bgrelay_forgotten_devices_total"] ?? 0 >= 1 })
            #expect(try await metrics()["bgrelay_forgotten_devices_total"] == 1)
            #expect(try await node.store.tokenOwner(goneToken) == nil)
            #expect(try await node.store.tokenOwner(heldToken) != nil, "its uplink is held: not gone")
            let provider = PushGatewayTests.Provider(client: client, base: node.providerURL, key: key, now: clock.now)
            let refused = try await provider.send(token: goneToken)
            #expect(refused.status == 400, "\(refused)")
            let sent = try await provider.send(token: heldToken)
            try #require(sent.status == 200, "\(sent)")
            guard case .push = await uplinks[1].next() else {
                Issue.record("the connected device had no push")
                return
            }
            uplinks[1].close()
        }
    }

    @Test func aRevokedTokenAnswers410WithItsTime() async throws {
        try await withDevice { device in
            let (node, enrollment) = (device.node, device.enrollment)
            let token = String(repeating: "ef", count: 32)
            let uplink = try await device.connect()
            #expect(await uplink.next() == .ready(device: enrollment.device))
            uplink.send(.register(token: token, topic: Self.app))
            #expect(try await node.eventually { try await node.store.tokenOwner(token) != nil })
            uplink.send(.revoke(token: token, atMilliseconds: 1_767_603_600_000))
            #expect(try await node.eventually { try await node.store.tokenOwner(token)?.revokedAt != nil })
            // The node that stored the revocation knows at once (another reads it within a second).
            let answer = try await device.provider.send(token: token)
            #expect(answer.status == 410 && answer.reason == "Unregistered", "\(answer)")
            #expect(answer.json["timestamp"] as? Int == 1_767_603_600_000, "\(answer.json)")
            // A device whose clock says the end of time: the revocation counts from the relay's
            // now (a date past 9999 was stored as '' and trapped the relay at the next push).
            let ahead = String(repeating: "fe", count: 32)
            uplink.send(.register(token: ahead, topic: Self.app))
            #expect(try await node.eventually { try await node.store.tokenOwner(ahead) != nil })
            uplink.send(.revoke(token: ahead, atMilliseconds: .max))
            #expect(try await node.eventually { try await node.store.tokenOwner(ahead)?.revokedAt != nil })
            let refused = try await device.provider.send(token: ahead)
            #expect(refused.status == 410, "\(refused)")
            let stamp = refused.json["timestamp"] as? Int ?? 0
            #expect(
                stamp > 1_767_603_600_000 && stamp < 4_102_444_800_000, "the relay's now, not the device's: \(stamp)")
            uplink.close()
        }
    }

    /// The device's own allowance (4) is more than the flooding provider's (3): the pushes its
    /// provider limit refuses spend none of the device's, so another provider still gets
    /// through. Before, each refused push spent one of the device's, and the other was refused.
    @Test func aProviderThatFloodsTheRelayIsToldToBackOffAndOthersAreNot() async throws {
        try await RelayNode.with(
            providerLimit: PushFloodLimit(perSecond: 0.001, burst: 3),
            deviceLimit: PushFloodLimit(perSecond: 0.001, burst: 4)
        ) { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            let enrollment = try await RawUplink.enroll(node, client: client)
            let token = String(repeating: "7f", count: 32)
            try await node.store.register(
                token: token, topic: Self.app, device: enrollment.device, now: SystemClock().now)
            let flooding = P256.Signing.PrivateKey()
            let other = P256.Signing.PrivateKey()
            try await node.addProviderKey(flooding, topics: [Self.app])
            try await node.store.addProviderKey(
                ProviderKeyRegistration(
                    keyID: "OTHER12345", teamID: PushGatewayTests.teamID, topics: [Self.app],
                    publicKeyPEM: other.publicKey.pemRepresentation), now: SystemClock().now)
            let first = provider(node, client: client, key: flooding)
            var statuses: [Int] = []
            for _ in 0..<5 { statuses.append(try await first.send(token: token).status) }
            #expect(statuses == [200, 200, 200, 429, 429])
            let second = provider(node, client: client, key: other)
            let answer = try await second.send(token: token, authorization: "bearer " + second.jwt(kid: "OTHER12345"))
            #expect(answer.status == 200, "another provider's limit is its own: \(answer)")
            #expect(try await node.store.pushLog().count == 4, "a refused push is not stored")
        }
    }

    @Test func aDeviceFloodedOverAllItsTokensIsHeldBackAndAnotherDeviceIsNot() async throws {
        try await RelayNode.with(deviceLimit: PushFloodLimit(perSecond: 0.001, burst: 3)) { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            let key = P256.Signing.PrivateKey()
            try await node.addProviderKey(key, topics: [Self.app, PushGatewayTests.other])
            let (flooded, other) = (
                try await RawUplink.enroll(node, client: client), try await RawUplink.enroll(node, client: client)
            )
            let (first, second, third) = (
                String(repeating: "a1", count: 32), String(repeating: "a2", count: 32),
                String(repeating: "b1", count: 32)
            )
            let now = SystemClock().now
            try await node.store.register(token: first, topic: Self.app, device: flooded.device, now: now)
            try await node.store.register(
                token: second, topic: PushGatewayTests.other, device: flooded.device, now: now)
            try await node.store.register(token: third, topic: Self.app, device: other.device, now: now)
            let provider = provider(node, client: client, key: key)
            var statuses: [Int] = []
            for (token, topic) in [
                (first, Self.app), (second, PushGatewayTests.other), (first, Self.app),
                (second, PushGatewayTests.other),
            ] {
                statuses.append(try await provider.send(token: token, headers: [("apns-topic", topic)]).status)
            }
            // Three for the device, whichever of its tokens; the fourth is held back.
            #expect(statuses == [200, 200, 200, 429])
            let answer = try await provider.send(token: third)
            #expect(answer.status == 200, "another device's allowance is its own: \(answer)")
            #expect(try await node.store.pushLog().count == 4, "a refused push is not stored")
        }
    }

    @Test func badUplinkInputIsRefusedAndChangesNothing() async throws {
        try await RelayNode.with { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            let a = try await RawUplink.enroll(node, client: client)
            let b = try await RawUplink.enroll(node, client: client)
            // No credential, a wrong secret, a malformed header: 401 before any stream.
            for authorization in ["", "Bearer \(a.device).\(b.secret)", "Bearer nonsense", "Basic abc"] {
                let refused = try await RawUplink.connect(
                    node, client: client, enrollment: a, authorization: authorization)
                #expect(refused.status == 401, "\(authorization)")
                #expect(await refused.nextLine()?.contains("unauthorized") == true)
            }
            let uplinkA = try await RawUplink.connect(node, client: client, enrollment: a)
            #expect(await uplinkA.next() == .ready(device: a.device))
            let token = String(repeating: "12", count: 32)
            uplinkA.send(.register(token: token, topic: Self.app))
            uplinkA.sendLine("not json")
            #expect(await uplinkA.next().map(Self.code) == "badFrame")
            uplinkA.sendLine(#"{"type":"push","push":{}}"#)
            #expect(await uplinkA.next().map(Self.code) == "badFrame")
            uplinkA.send(.register(token: "short", topic: Self.app))
            #expect(await uplinkA.next().map(Self.code) == "malformedToken")
            uplinkA.send(.register(token: String(repeating: "34", count: 32), topic: "not a topic"))
            #expect(await uplinkA.next().map(Self.code) == "malformedTopic")
            uplinkA.send(.ack(seq: 999))  // never sent: nothing to acknowledge, nothing changes

            // B may not take A's token, nor revoke it, nor acknowledge A's pushes.
            let uplinkB = try await RawUplink.connect(node, client: client, enrollment: b)
            #expect(await uplinkB.next() == .ready(device: b.device))
            uplinkB.send(.register(token: token, topic: Self.app))
            #expect(await uplinkB.next().map(Self.code) == "tokenTaken")
            uplinkB.send(.revoke(token: token, atMilliseconds: 1))
            #expect(await uplinkB.next().map(Self.code) == "unknownToken")
            let owner = try await node.store.tokenOwner(token)
            #expect(owner?.device == a.device && owner?.revokedAt == nil)
            #expect(try await node.store.tokenOwner(String(repeating: "34", count: 32)) == nil)
            uplinkA.close()
            uplinkB.close()
        }
    }

    /// A relay started with an enrollment token enrolls only devices that present it — raw
    /// clients, bgd at its first start, `bgctl push relay enroll` — and every node counts its
    /// enrollments against a rate (refusals cost nothing).
    @Test func enrollmentAsksForTheRelaysTokenAndIsRateLimited() async throws {
        let secret = "enroll-0123456789abcdef"
        try await RelayNode.with(
            enrollment: EnrollmentPolicy(token: secret, limit: PushFloodLimit(perSecond: 0.001, burst: 3))
        ) { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            func enroll(_ authorization: String?) async throws -> (status: Int, body: String) {
                var request = HTTPClientRequest(url: node.uplinkURL + "/v1/devices")
                request.method = .POST
                if let authorization { request.headers.add(name: "authorization", value: authorization) }
                let response = try await client.execute(request, timeout: .seconds(10))
                return (Int(response.status.code), String(buffer: try await response.body.collect(upTo: 4096)))
            }
            // None presented, or a wrong one: each said for what it is.
            for (authorization, code) in [
                (nil, "enrollmentTokenRequired"), ("Basic \(secret)", "enrollmentTokenRequired"),
                ("Bearer wrong-token-0123456789", "enrollmentTokenInvalid"),
                ("Bearer \(secret)x", "enrollmentTokenInvalid"),
            ] {
                let refused = try await enroll(authorization)
                #expect(refused.status == 401 && refused.body.contains(code), "\(refused)")
            }
            #expect(try await enroll("Bearer \(secret)").status == 200)

            // bgd: refused with a wrong token (nothing kept), enrolled with the right one.
            try await TestDaemon.with { daemon in
                let wrong = try await RawHTTP.request(
                    daemon.socketPath, .POST, "/v1/push/relay",
                    body: try JSONEncoder().encode(
                        PushRelayEnrollRequest(
                            url: node.uplinkURL, certificate: node.certificatePath,
                            enrollmentToken: "nope-0123456789abc")))
                #expect(
                    wrong.errorCode == "relayUnreachable"
                        && String(decoding: wrong.body, as: UTF8.self).contains("enrollmentTokenInvalid"), "\(wrong)")
                #expect(!FileManager.default.fileExists(atPath: daemon.directory + "/state/push-relay.json"))
                let enrolled = try await PushRegistrationTests().bgctl(
                    [
                        "push", "relay", "enroll", node.uplinkURL, "--certificate", node.certificatePath,
                        "--enrollment-token", secret,
                    ], daemon)
                #expect(enrolled.status == 0 && enrolled.standardOutput.contains("Enrolled with"), "\(enrolled)")
                // Enrolling again would make a new device and strand the apps' tokens with the
                // old one: refused, naming --replace, and the credential kept.
                let credential = try Data(contentsOf: URL(fileURLWithPath: daemon.directory + "/state/push-relay.json"))
                let again = try await PushRegistrationTests().bgctl(
                    [
                        "push", "relay", "enroll", node.uplinkURL, "--certificate", node.certificatePath,
                        "--enrollment-token", secret,
                    ], daemon)
                #expect(again.status == 4 && again.standardError.contains("--replace"), "\(again)")
                #expect(
                    try Data(contentsOf: URL(fileURLWithPath: daemon.directory + "/state/push-relay.json"))
                        == credential)
            }
            #expect(try await enroll("Bearer \(secret)").status == 200)
            let flooded = try await enroll("Bearer \(secret)")
            #expect(flooded.status == 429 && flooded.body.contains("tooManyEnrollments"), "\(flooded)")
            let shown = try await node.metrics(client: client)
            #expect(shown["bgrelay_enrollments_total"] == 3)
            #expect(shown["bgrelay_enrollments_refused_total{reason=\"enrollmentTokenRequired\"}"] == 2)
            #expect(shown["bgrelay_enrollments_refused_total{reason=\"enrollmentTokenInvalid\"}"] == 3)
            #expect(shown["bgrelay_enrollments_refused_total{reason=\"tooManyEnrollments\"}"] == 1)
        }
    }

    /// An app token another device of the relay holds: the uplink stays up, and the refusal
    /// shows in `bgctl push relay status` with what it means.
    @Test func aTokenAnotherDeviceHoldsShowsInTheStatus() async throws {
        try await RelayNode.with { node in
            try await TestDaemon.with { daemon in
                try await daemon.register(Self.app, command: ["/bin/true"], interval: .never)
                let token = try await daemon.admin.send(
                    .post, "/v1/apps/\(Self.app)/push/token", as: DeviceTokenInfo.self
                ).token
                let other = try await node.store.enroll(now: Date())
                try await node.store.register(token: token, topic: Self.app, device: other.device, now: Date())
                let enrolled = try await PushRegistrationTests().bgctl(
                    ["push", "relay", "enroll", node.uplinkURL, "--certificate", node.certificatePath], daemon)
                #expect(enrolled.status == 0, "\(enrolled)")
                #expect(
                    await eventuallyAsync {
                        let status = try? await daemon.admin.send(.get, "/v1/push/relay", as: PushRelayStatus.self)
                        return status?.lastRefusal?.hasPrefix("tokenTaken") == true
                    })
                let shown = try await PushRegistrationTests().bgctl(["push", "relay", "status"], daemon)
                #expect(
                    shown.standardOutput.contains("Last refusal: tokenTaken")
                        && shown.standardOutput.contains("another device of this relay holds that app token"),
                    "\(shown)")
            }
        }
    }

    /// Enrolling with another relay while connected (`enroll --replace`) moves the uplink there:
    /// the new relay learns the apps' tokens and gets the connection. The old connection stayed
    /// up for as long as keep-alives held it, and the new relay never heard of the tokens.
    @Test func enrollingAnewWhileConnectedMovesTheUplink() async throws {
        try await RelayNode.with { first in
            try await RelayNode.with { second in
                try await TestDaemon.with { daemon in
                    try await daemon.register(Self.app, command: ["/bin/true"], interval: .never)
                    let token = try await daemon.admin.send(
                        .post, "/v1/apps/\(Self.app)/push/token", as: DeviceTokenInfo.self
                    ).token
                    func enroll(_ node: RelayNode, _ extra: [String] = []) async throws {
                        let enrolled = try await PushRegistrationTests().bgctl(
                            ["push", "relay", "enroll", node.uplinkURL, "--certificate", node.certificatePath] + extra,
                            daemon)
                        #expect(enrolled.status == 0, "\(enrolled)")
                    }
                    func connected(to node: RelayNode) async -> Bool {
                        let status = try? await daemon.admin.send(.get, "/v1/push/relay", as: PushRelayStatus.self)
                        let owner = try? await node.store.tokenOwner(token)
                        return status?.state == .connected && status?.url == node.uplinkURL
                            && owner != nil && owner?.device == status?.device
                    }
                    try await enroll(first)
                    #expect(await eventuallyAsync { await connected(to: first) }, "connected to the first relay")
                    try await enroll(second, ["--replace"])
                    #expect(await eventuallyAsync { await connected(to: second) }, "moved to the second relay")
                }
            }
        }
    }

    /// A relay that forgot the device (a laptop off for months, a database restored from before
    /// it enrolled) refuses its credential: bgd, told to use that relay (`--push-relay`), enrolls
    /// again and names its tokens, so providers' pushes reach the apps again. It used to retry
    /// the dead credential every 5 minutes for ever.
    @Test func aDeviceTheRelayForgotEnrollsAgain() async throws {
        try await RelayNode.with { node in
            let directory = TemporaryDirectory.make()
            let relay = PushUplink.Configuration(url: node.uplinkURL, certificate: node.certificatePath)
            @Sendable func connected(_ daemon: TestDaemon, token: String) async -> String? {
                let status = try? await daemon.admin.send(.get, "/v1/push/relay", as: PushRelayStatus.self)
                let owner = try? await node.store.tokenOwner(token)
                guard status?.state == .connected, let device = status?.device, owner?.device == device else {
                    return nil
                }
                return device
            }
            let (token, first) = try await TestDaemon.with(directory: directory, pushRelay: relay) { daemon in
                try await daemon.register(Self.app, command: ["/bin/true"], interval: .never)
                let token = try await daemon.admin.send(
                    .post, "/v1/apps/\(Self.app)/push/token", as: DeviceTokenInfo.self
                ).token
                #expect(
                    await eventuallyAsync { await connected(daemon, token: token) != nil }, "enrolled and connected")
                return (token, await connected(daemon, token: token))
            }
            // Months later, bgd down all along: the relay forgets the device with its tokens.
            let report = try await node.store.prune(
                now: Date().addingTimeInterval(400 * 86400), holdFor: 86400, keepEnded: 86400, forgetAfter: 90 * 86400)
            #expect(report.devicesForgotten == 1)
            #expect(try await node.store.tokenOwner(token) == nil)
            try await TestDaemon.with(directory: directory, pushRelay: relay) { daemon in
                #expect(
                    await eventuallyAsync { await connected(daemon, token: token) != nil },
                    "enrolled again, its token named to the relay")
                let again = await connected(daemon, token: token)
                #expect(again != nil && again != first, "as a new device")
            }
        }
    }

    @Test func bgctlEnrollmentRefusesWhatItCannotUse() async throws {
        try await TestDaemon.with { daemon in
            let status = try await daemon.admin.send(.get, "/v1/push/relay", as: PushRelayStatus.self)
            #expect(status.state == .off)
            for (body, code) in [
                (PushRelayEnrollRequest(url: "ftp://relay"), "invalidRelayURL"),
                (
                    PushRelayEnrollRequest(url: "https://localhost:1", certificate: "/nonexistent.pem"),
                    "invalidRelayURL"
                ),
                // Readable from bgd's working directory, but a path relative to whose?
                (PushRelayEnrollRequest(url: "https://localhost:1", certificate: "Package.swift"), "invalidRelayURL"),
                (PushRelayEnrollRequest(url: "https://localhost:1"), "relayUnreachable"),
            ] {
                let answer = try await RawHTTP.request(
                    daemon.socketPath, .POST, "/v1/push/relay", body: try JSONEncoder().encode(body))
                #expect(answer.errorCode == code, "\(body): \(answer)")
            }
            #expect(!FileManager.default.fileExists(atPath: daemon.directory + "/state/push-relay.json"))
            let shown = try await PushRegistrationTests().bgctl(["push", "relay", "status"], daemon)
            #expect(shown.status == 0 && shown.standardOutput.contains("No push relay"), "\(shown)")
            let refused = try await PushRegistrationTests().bgctl(["push", "relay", "enroll", "not a url"], daemon)
            // Refused by bgctl before bgd is asked: a usage error naming what a relay's URL is like.
            #expect(
                refused.status == 64 && refused.standardError.contains("a relay's uplink is like https://"),
                "\(refused)")
        }
    }

    /// A relay node in this process (`offersLines` or not) holding a provider key for the app, a
    /// bgd that enrolls with it and connects out, and the provider's client.
    private func withDaemonOnARelay(
        offersLines: Bool = true,
        _ body: @Sendable (RelayNode, HTTPClient, P256.Signing.PrivateKey, TestDaemon) async throws -> Void
    ) async throws {
        try await RelayNode.with(offersLines: offersLines) { node in
            let client = node.client()
            defer { _ = client.shutdown() }
            nonisolated(unsafe) let key = P256.Signing.PrivateKey()
            try await node.addProviderKey(key, topics: [Self.app])
            try await TestDaemon.with(
                clock: ManualClock(now: SystemClock().now),
                pushRelay: .init(url: node.uplinkURL, certificate: node.certificatePath)
            ) { daemon in try await body(node, client, key, daemon) }
        }
    }

    /// The code of a refusal or of the relay's closing line.
    static func code(_ frame: UplinkFrame) -> String? {
        switch frame {
        case .refused(let code, _), .closing(let code, _): code
        default: nil
        }
    }
}

/// Several relay nodes on one PostgreSQL: any node takes any provider's push and any device's
/// uplink; the node holding the device is told (LISTEN/NOTIFY) and sends it; a device that
/// reconnects to another node fences the old session off.
@Suite(
    .timeLimit(.minutes(5)),
    .enabled(if: TestPostgres.isAvailable, "needs PostgreSQL: eval \"$(Tests/Postgres/start.sh)\" (CI does)"))
struct PushRelayNodesTests {
    static let app = PushGatewayTests.app

    @Test func aPushToAnyNodeReachesTheDeviceOnAnother() async throws {
        try await RelayNode.withNodes(3) { nodes in
            let clients = nodes.map { $0.client() }
            defer { for client in clients { _ = client.shutdown() } }
            nonisolated(unsafe) let key = P256.Signing.PrivateKey()
            try await nodes[0].addProviderKey(key, topics: [Self.app])
            let providers = (0..<3).map {
                PushGatewayTests.Provider(
                    client: clients[$0], base: nodes[$0].providerURL, key: key, now: SystemClock().now)
            }
            let enrollment = try await RawUplink.enroll(nodes[1], client: clients[1])
            let onNode2 = try await RawUplink.connect(nodes[2], client: clients[2], enrollment: enrollment)
            #expect(await onNode2.next() == .ready(device: enrollment.device))
            let token = String(repeating: "5e", count: 32)
            onNode2.send(.register(token: token, topic: Self.app))
            #expect(try await nodes[0].eventually { try await nodes[0].store.tokenOwner(token) != nil })
            // The relay's other nodes learn of the token from PostgreSQL, not from a cache.
            for (index, provider) in providers.enumerated() {
                let answer = try await provider.send(
                    token: token, headers: [("apns-id", "00000000-0000-0000-0000-00000000000\(index)")])
                #expect(answer.status == 200, "node \(index): \(answer)")
            }
            var received: [String] = []
            for _ in 0..<3 {
                guard case .push(let push) = await onNode2.next() else { break }
                received.append(push.apnsID)
                onNode2.send(.ack(seq: push.seq))
            }
            #expect(received == (0..<3).map { "00000000-0000-0000-0000-00000000000\($0)" })
            #expect(
                try await nodes[0].eventually {
                    try await nodes[0].store.pushLog().allSatisfy { $0.state == .delivered }
                })

            // The device comes back through node 0 while node 2 still holds its old uplink: the
            // next push goes to the new uplink, and node 2's session ends without sending it.
            let onNode0 = try await RawUplink.connect(nodes[0], client: clients[0], enrollment: enrollment)
            #expect(await onNode0.next() == .ready(device: enrollment.device))
            #expect(
                try await providers[1].send(
                    token: token, headers: [("apns-id", "00000000-0000-0000-0000-000000000009")]
                ).status == 200)
            guard case .push(let push) = await onNode0.next() else { Issue.record("no push on the new uplink"); return }
            #expect(push.apnsID == "00000000-0000-0000-0000-000000000009")
            guard case .closing(let code, _) = await onNode2.next() else { Issue.record("node 2 did not end"); return }
            #expect(code == "superseded")
            onNode2.close()
            #expect(await onNode2.next() == nil, "the superseded uplink ends once the device closed its side")
            onNode0.send(.ack(seq: push.seq))
            #expect(
                try await nodes[0].eventually {
                    try await nodes[0].store.pushLog().map(\.state).allSatisfy { $0 == .delivered }
                })
            // Node 2's session ended without giving up node 0's claim; node 0's, when the device
            // goes, gives it up: a now-or-never push then ends at once, as on one node (before,
            // the device counted as held for good, and such a push waited a minute).
            let store = try #require(nodes[0].store as? PostgresRelayStore)
            #expect(try await store.claimHolder(of: enrollment.device) == "node0")
            onNode0.close()
            #expect(try await nodes[0].eventually { try await store.claimHolder(of: enrollment.device) == nil })
            let nowOrNever = try await providers[1].send(
                token: token, headers: [("apns-id", "00000000-0000-0000-0000-000000000010"), ("apns-expiration", "0")])
            #expect(nowOrNever.status == 200)
            #expect(try await store.pushLog().last?.state == .expired)
        }
    }
}
