import BackgroundGateway
import BackgroundModel
import BackgroundTesting
import Foundation
import GRDB
import Logging
import Testing

@testable import BackgroundRelay

/// The relay's store, on a real SQLite file and on a real PostgreSQL (each test its own
/// database): devices and their tokens, claims, and a push's life from commit to its end — each
/// end with its reason. Both stores answer every case the same.
struct RelayStoreTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)
    let topic = "com.example.news"

    enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case sqlite, postgres
        var testDescription: String { rawValue }
        /// PostgreSQL where a server is configured (`postgresIsThere` says why not otherwise).
        static var available: [Backend] { TestPostgres.isAvailable ? allCases : [.sqlite] }
    }

    func withStore(
        _ backend: Backend, tokensPerDevice: Int = defaultTokensPerDevice, _ body: (any RelayStore) async throws -> Void
    ) async throws {
        switch backend {
        case .sqlite:
            var store = try Relay.openStore(in: TemporaryDirectory.make() + "/relay")
            store.tokensPerDevice = tokensPerDevice
            try await body(store)
        case .postgres:
            let store = try PostgresRelayStore(
                url: try await TestPostgres.makeDatabase(), logger: Logger(label: "test"), tokensPerDevice: tokensPerDevice)
            let pool = Task { await store.runPool() }
            defer { pool.cancel() }
            try await store.prepare()
            try await body(store)
        }
    }

    /// A database URL is checked before any connection: a port NIO cannot hold (the pool tried
    /// for ever, and `bgrelay keys list` hung) or another scheme is said so.
    @Test func aDatabaseURLThatCannotBeReachedIsRefusedAtOnce() {
        for (url, says) in [
            ("postgres://u:p@127.0.0.1:99999/db", "a port is 1 to 65535"), ("mysql://u@127.0.0.1/db", "is not postgres://"),
            ("postgres://127.0.0.1/db", "is not postgres://"),
        ] {
            let error = #expect(throws: PostgresURLProblem.self) {
                _ = try PostgresRelayStore(url: url, logger: Logger(label: "test"))
            }
            #expect(error?.description.contains(says) == true, "\(url): \(String(describing: error))")
        }
    }

    /// Dates a relay before session 28 stored from outside — a provider's expiration past 9999,
    /// a device's revoke `at` near Int64.max — trapped the relay whenever it read them back, so at
    /// every start. Opening the SQLite store mends them (`relay-readableDates`).
    @Test func datesNoReadCouldTakeAreMendedWhenTheStoreOpens() async throws {
        let directory = TemporaryDirectory.make() + "/relay"
        let token = String(repeating: "ab", count: 32)
        do {
            let store = try Relay.openStore(in: directory)
            let owner = try await registeredOwner(store, token: token)
            _ = try await store.commit(
                [push(owner, token: token, id: "00000000-0000-4000-8000-000000000001")], now: now, connected: { _ in false })
            try await store.revoke(token: token, device: owner.device, at: now)
        }
        try await OlderStoreFile.rewrite(
            directory + "/" + Relay.databaseName,
            with: ["UPDATE push SET expiration = '30000-01-01 00:00:00.000'", "UPDATE deviceToken SET revokedAt = ''"],
            forgetting: "relay-readableDates")
        let store = try Relay.openStore(in: directory)
        let owner = try #require(try await store.tokenOwner(token))
        #expect(owner.revokedAt == now, "the registration's time")
        let expirations = try await store.database.read { db in
            try Date.fetchAll(db, sql: "SELECT expiration FROM push")
        }
        #expect(expirations == [StorableDates.latest])
    }

    @Test(.enabled(if: TestPostgres.isAvailable, "needs PostgreSQL: eval \"$(Tests/Postgres/start.sh)\" (CI does)"))
    func postgresIsThere() async throws {
        try await withStore(.postgres) { store in
            let version = try await store.credentialsVersion()
            #expect(version == 0)
        }
    }

    /// A newly enrolled device with `token` registered for `topic`: the token's owner.
    func registeredOwner(_ store: any RelayStore, token: String) async throws -> RelayTokenOwner {
        let (device, _) = try await store.enroll(now: now)
        try await store.register(token: token, topic: topic, device: device, now: now)
        return try #require(try await store.tokenOwner(token))
    }

    func push(
        _ owner: RelayTokenOwner, token: String, id: String, collapse: String? = nil, expiration: Date? = nil
    ) -> AcceptedPush<RelayTokenOwner> {
        AcceptedPush(
            owner: owner, deviceToken: token, apnsID: id, pushType: "background", priority: 5, collapseID: collapse,
            expiration: expiration, payload: Data(#"{"aps":{"content-available":1}}"#.utf8))
    }

    /// A revoke names a token as a registration does: 64 hex digits. Before, a revoke's token
    /// was taken as it came, and one with NUL in it failed on PostgreSQL as the store's trouble,
    /// not the device's; now both stores refuse it as `malformedToken`, and nothing changes.
    @Test(arguments: Backend.available)
    func aRevokeOfNoTokenIsRefused(_ backend: Backend) async throws {
        try await withStore(backend) { store in
            let token = String(repeating: "ab", count: 32)
            let owner = try await registeredOwner(store, token: token)
            for bad in [token.dropLast() + "\u{0}", "", String(repeating: "zz", count: 32), token + "ab"] {
                await #expect(throws: RelayRefusal.malformedToken(String(bad))) {
                    try await store.revoke(token: String(bad), device: owner.device, at: now)
                }
            }
            #expect(try await store.tokenOwner(token)?.revokedAt == nil)
            // In capitals it is the same token, as a registration takes it.
            try await store.revoke(token: token.uppercased(), device: owner.device, at: now)
            #expect(try await store.tokenOwner(token)?.revokedAt == now)
        }
    }

    @Test(arguments: Backend.available)
    func aDeviceAuthenticatesWithItsSecretOnly(_ backend: Backend) async throws {
        try await withStore(backend) { store in
        let (device, secret) = try await store.enroll(now: now)
        let (other, otherSecret) = try await store.enroll(now: now)
        #expect(device != other && secret != otherSecret && device.count == 32 && secret.count == 64)
        #expect(try await store.authenticate(device: device, secret: secret))
        #expect(try await !store.authenticate(device: device, secret: otherSecret))
        #expect(try await !store.authenticate(device: "nobody", secret: secret))
        #expect(try await !store.authenticate(device: device, secret: ""))
        }
    }

    @Test(arguments: Backend.available)
    func aTokenIsBoundToTheFirstDeviceAndItsTopic(_ backend: Backend) async throws {
        try await withStore(backend) { store in
        let (a, _) = try await store.enroll(now: now)
        let (b, _) = try await store.enroll(now: now)
        let token = String(repeating: "ab", count: 32)
        try await store.register(token: token.uppercased(), topic: topic, device: a, now: now)
        try await store.register(token: token, topic: topic, device: a, now: now)  // again: no-op
        await #expect(throws: RelayRefusal.tokenTaken(token)) {
            try await store.register(token: token, topic: topic, device: b, now: now)
        }
        await #expect(throws: RelayRefusal.topicMismatch(token)) {
            try await store.register(token: token, topic: "com.example.other", device: a, now: now)
        }
        await #expect(throws: RelayRefusal.unknownToken(token)) {
            try await store.revoke(token: token, device: b, at: now)
        }
        let owner = try #require(try await store.tokenOwner(token))
        #expect(owner.device == a && owner.topic == topic && owner.revokedAt == nil)
        let version = try await store.credentialsVersion()
        #expect(version > 0 && store.credentials.current(elapsed: .zero, refresh: { nil }) == version)
        // A token nobody registered (bgd revoked it before it ever reached the relay, and names
        // it on every connect): revoking it is no error, and changes nothing.
        let neverSeen = String(repeating: "0f", count: 32)
        try await store.revoke(token: neverSeen, device: b, at: now)
        #expect(try await store.tokenOwner(neverSeen) == nil)
        #expect(try await store.credentialsVersion() == version)
        }
    }

    /// A device holds a bounded number of tokens: at the limit its oldest revoked ones make
    /// room, and with all active a new one is refused (nothing changes). Tokens revoked longer
    /// than the retention ago are forgotten by the pruner; active ones stay whatever their age.
    @Test(arguments: Backend.available)
    func aDeviceHoldsBoundedTokensAndRevokedOnesAreForgotten(_ backend: Backend) async throws {
        try await withStore(backend, tokensPerDevice: 3) { store in
            let (device, _) = try await store.enroll(now: now)
            let (other, _) = try await store.enroll(now: now)
            func token(_ n: Int) -> String { String(format: "%064x", n) }
            for n in 1...3 { try await store.register(token: token(n), topic: topic, device: device, now: now) }
            await #expect(throws: RelayRefusal.tooManyTokens(3)) {
                try await store.register(token: token(4), topic: topic, device: device, now: now)
            }
            #expect(try await store.tokenOwner(token(4)) == nil, "refused: nothing stored")
            try await store.register(token: token(1), topic: topic, device: device, now: now)  // again: a no-op
            try await store.register(token: token(10), topic: topic, device: other, now: now)  // another device's own
            // Two revoked: the next new token takes the place of the one revoked first.
            try await store.revoke(token: token(2), device: device, at: now.addingTimeInterval(20))
            try await store.revoke(token: token(1), device: device, at: now.addingTimeInterval(10))
            try await store.register(token: token(5), topic: topic, device: device, now: now.addingTimeInterval(30))
            #expect(try await store.tokenOwner(token(1)) == nil, "the oldest revoked made room")
            #expect(try await store.tokenOwner(token(2))?.revokedAt == now.addingTimeInterval(20), "still answers 410")
            #expect(try await store.tokenOwner(token(5))?.device == device)

            let version = try await store.credentialsVersion()
            let day: TimeInterval = 86400
            var report = try await store.prune(now: now.addingTimeInterval(29 * day), holdFor: day, keepEnded: 30 * day, forgetAfter: 1e9)
            #expect(report.tokensForgotten == 0)
            #expect(try await store.credentialsVersion() == version)
            report = try await store.prune(now: now.addingTimeInterval(31 * day), holdFor: day, keepEnded: 30 * day, forgetAfter: 1e9)
            #expect(report.tokensForgotten == 1)
            #expect(try await store.tokenOwner(token(2)) == nil, "forgotten: a push to it is a bad token now")
            #expect(try await store.tokenOwner(token(3))?.revokedAt == nil, "an active token stays")
            #expect(try await store.credentialsVersion() > version, "the provider side drops what it cached")
        }
    }

    /// A device enrolled longer than the hold ago that never connected and holds nothing is
    /// forgotten (its credential is refused from then on); one that connected, or holds a token
    /// or a push, stays whatever its age, and so does a younger one.
    @Test(arguments: Backend.available)
    func devicesThatNeverConnectedAreForgottenAfterTheHold(_ backend: Backend) async throws {
        try await withStore(backend) { store in
            let day: TimeInterval = 86400
            let (idle, idleSecret) = try await store.enroll(now: now)
            let (connected, _) = try await store.enroll(now: now)
            _ = try await store.claim(device: connected, node: "a", now: now)
            let token = String(repeating: "ab", count: 32)
            let holder = try await registeredOwner(store, token: token).device
            let pushToken = String(repeating: "cd", count: 32)
            let pushed = try await registeredOwner(store, token: pushToken)
            _ = try await store.commit([push(pushed, token: pushToken, id: "p")], now: now, connected: { _ in false })
            try await store.revoke(token: pushToken, device: pushed.device, at: now)  // the push stays, ended
            let (young, _) = try await store.enroll(now: now.addingTimeInterval(20 * day))

            var report = try await store.prune(now: now.addingTimeInterval(29 * day), holdFor: 30 * day, keepEnded: 100 * day, forgetAfter: 1e9)
            #expect(report.devicesForgotten == 0, "not yet held 30 days")
            report = try await store.prune(now: now.addingTimeInterval(31 * day), holdFor: 30 * day, keepEnded: 100 * day, forgetAfter: 1e9)
            #expect(report.devicesForgotten == 1)
            #expect(try await store.authenticate(device: idle, secret: idleSecret) == false, "forgotten")
            for device in [connected, holder, pushed.device, young] {
                #expect(try await store.claim(device: device, node: "a", now: now) > 0, "\(device) stays")
            }
            #expect(try await store.tokenOwner(token)?.device == holder)
            #expect(try await store.pushLog().count == 1)
        }
    }

    /// A device not seen for `forgetAfter` — its last uplink opened that long ago, and no node
    /// saying it holds one — is forgotten with its tokens and its pushes, pending or not: a
    /// provider's push to such a token answers BadDeviceToken from then on. One a node holds
    /// (`markSeen`), or that connected since, stays.
    @Test(arguments: Backend.available)
    func devicesGoneLongerThanTheirHoldAreForgottenWithTheirTokens(_ backend: Backend) async throws {
        try await withStore(backend) { store in
            let day: TimeInterval = 86400
            let (goneToken, heldToken, backToken) = (
                String(repeating: "ab", count: 32), String(repeating: "cd", count: 32), String(repeating: "ef", count: 32)
            )
            let gone = try await registeredOwner(store, token: goneToken)
            _ = try await store.claim(device: gone.device, node: "a", now: now)
            _ = try await store.commit([push(gone, token: goneToken, id: "p")], now: now, connected: { _ in false })
            let held = try await registeredOwner(store, token: heldToken)
            _ = try await store.claim(device: held.device, node: "a", now: now)
            let back = try await registeredOwner(store, token: backToken)
            _ = try await store.claim(device: back.device, node: "b", now: now.addingTimeInterval(50 * day))
            let version = try await store.credentialsVersion()

            try await store.markSeen([held.device], now: now.addingTimeInterval(80 * day))
            var report = try await store.prune(
                now: now.addingTimeInterval(89 * day), holdFor: 30 * day, keepEnded: 7 * day, forgetAfter: 90 * day)
            #expect(report.devicesForgotten == 0, "not yet gone 90 days")
            report = try await store.prune(
                now: now.addingTimeInterval(91 * day), holdFor: 30 * day, keepEnded: 7 * day, forgetAfter: 90 * day)
            #expect(report.devicesForgotten == 1 && report.tokensForgotten == 1, "\(report)")
            #expect(try await store.tokenOwner(goneToken) == nil)
            #expect(try await store.pushLog().isEmpty, "its push went with it")
            #expect(try await store.credentialsVersion() > version, "the provider side's caches hear of it")
            #expect(try await store.claim(device: gone.device, node: "a", now: now.addingTimeInterval(91 * day)) == 0)
            #expect(try await store.tokenOwner(heldToken)?.device == held.device)
            #expect(try await store.tokenOwner(backToken)?.device == back.device)
        }
    }

    @Test(arguments: Backend.available)
    func pushesEndDeliveredReplacedExpiredOrRevoked(_ backend: Backend) async throws {
        try await withStore(backend) { store in
        let token = String(repeating: "cd", count: 32)
        let owner = try await registeredOwner(store, token: token)
        let device = owner.device
        let touched = try await store.commit(
            [
                push(owner, token: token, id: "a", collapse: "c"),
                push(owner, token: token, id: "b", collapse: "c"),
                push(owner, token: token, id: "c", expiration: now.addingTimeInterval(10)),
                push(owner, token: token, id: "d", expiration: Date(timeIntervalSince1970: 0)),
                push(owner, token: token, id: "e"),
            ], now: now, connected: { _ in false })
        #expect(touched == [device])
        let fencing = try await store.claim(device: device, node: "a", now: now)
        // Later than c's expiration: it ends expired on the next read.
        let pending = try await store.pendingPushes(of: device, excluding: [], fencing: fencing, now: now.addingTimeInterval(60))
        #expect(pending.map(\.apnsID) == ["b", "e"])
        // What the session sent and awaits the acknowledgement of is left out of its next read.
        #expect(
            try await store.pendingPushes(of: device, excluding: [pending[0].seq], fencing: fencing, now: now)
                .map(\.apnsID) == ["e"])
        #expect(try await store.deliver(pending[0].seq, device: device, fencing: fencing, now: now) == now)
        #expect(try await store.deliver(pending[0].seq, device: device, fencing: fencing, now: now) == nil)  // repeated
        // A newer claim (the device reconnected, here or on another node) fences the old one off.
        let newer = try await store.claim(device: device, node: "b", now: now)
        #expect(newer > fencing)
        await #expect(throws: RelayRefusal.superseded) {
            try await store.deliver(pending[1].seq, device: device, fencing: fencing, now: now)
        }
        await #expect(throws: RelayRefusal.superseded) {
            try await store.pendingPushes(of: device, excluding: [], fencing: fencing, now: now)
        }
        try await store.revoke(token: token, device: device, at: now)
        #expect(try await store.pushLog().map(\.state) == [.replaced, .delivered, .expired, .expired, .revoked])
        #expect(try await store.pendingPushes(of: device, excluding: [], fencing: newer, now: now).isEmpty)
        #expect(try await store.pushCounts()[.pending] == nil)
        }
    }

    @Test(arguments: Backend.available)
    func nowOrNeverReachesAConnectedDevice(_ backend: Backend) async throws {
        try await withStore(backend) { store in
        let token = String(repeating: "ef", count: 32)
        let owner = try await registeredOwner(store, token: token)
        let device = owner.device
        _ = try await store.commit(
            [push(owner, token: token, id: "z", expiration: Date(timeIntervalSince1970: 0))], now: now,
            connected: { $0 == device })
        let fencing = try await store.claim(device: device, node: "a", now: now)
        let pending = try await store.pendingPushes(of: device, excluding: [], fencing: fencing, now: now)
        #expect(pending.map(\.apnsID) == ["z"])
        // bgd is told it goes now or never, not the minute the relay gives the device.
        #expect(pending.map(\.expirationMilliseconds) == [0])
        }
    }

    /// A now-or-never push to a device that is away ends expired and displaces nothing: the push
    /// with the same collapse id still waits for the device. Before, it replaced that push and
    /// then expired itself, and the device got neither.
    @Test(arguments: Backend.available)
    func aNowOrNeverPushThatEndsAtOnceReplacesNothing(_ backend: Backend) async throws {
        try await withStore(backend) { store in
            let token = String(repeating: "e1", count: 32)
            let owner = try await registeredOwner(store, token: token)
            _ = try await store.commit(
                [push(owner, token: token, id: "kept", collapse: "score")], now: now, connected: { _ in false })
            _ = try await store.commit(
                [push(owner, token: token, id: "gone", collapse: "score", expiration: Date(timeIntervalSince1970: 0))],
                now: now, connected: { _ in false })
            #expect(try await store.pushLog().map(\.state) == [.pending, .expired])
            let fencing = try await store.claim(device: owner.device, node: "a", now: now)
            #expect(
                try await store.pendingPushes(of: owner.device, excluding: [], fencing: fencing, now: now).map(\.apnsID)
                    == ["kept"])
        }
    }

    /// A push sent to the device just before its expiration, whose acknowledgement is on its
    /// way, is not expired by the session's next read: the device has it. Before, a read rung
    /// by another push in between marked it expired, and the acknowledgement changed nothing.
    @Test(arguments: Backend.available)
    func aSentPushAwaitingItsAcknowledgementIsNotExpiredUnderIt(_ backend: Backend) async throws {
        try await withStore(backend) { store in
            let token = String(repeating: "e3", count: 32)
            let owner = try await registeredOwner(store, token: token)
            _ = try await store.commit(
                [push(owner, token: token, id: "late", expiration: now.addingTimeInterval(1))], now: now,
                connected: { _ in true })
            let fencing = try await store.claim(device: owner.device, node: "a", now: now)
            let sent = try await store.pendingPushes(of: owner.device, excluding: [], fencing: fencing, now: now)
            #expect(sent.map(\.apnsID) == ["late"])
            let seqs = Set(sent.map(\.seq))
            let later = now.addingTimeInterval(2)
            #expect(try await store.pendingPushes(of: owner.device, excluding: seqs, fencing: fencing, now: later).isEmpty)
            #expect(try await store.deliver(Array(seqs), device: owner.device, fencing: fencing, now: later).count == 1)
            #expect(try await store.pushLog().map(\.state) == [.delivered])
        }
    }

    /// Across nodes, a device counts as held while some session has its newest claim: once
    /// that session gives the claim up (an older one's ending changes nothing), a now-or-never
    /// push to the device ends at once, as on one node. Before, no claim was ever given up,
    /// and such a push waited a minute for a device long gone.
    @Test(.enabled(if: TestPostgres.isAvailable, "needs PostgreSQL: eval \"$(Tests/Postgres/start.sh)\" (CI does)"))
    func aClaimGivenUpHoldsTheDeviceNoLonger() async throws {
        try await withStore(.postgres) { store in
            let token = String(repeating: "e2", count: 32)
            let owner = try await registeredOwner(store, token: token)
            let older = try await store.claim(device: owner.device, node: "a", now: now)
            let newer = try await store.claim(device: owner.device, node: "b", now: now)
            func nowOrNever(_ id: String) async throws {
                _ = try await store.commit(
                    [push(owner, token: token, id: id, expiration: Date(timeIntervalSince1970: 0))], now: now,
                    connected: { _ in false })
            }
            try await store.release(device: owner.device, fencing: older)
            try await nowOrNever("held elsewhere")
            try await store.release(device: owner.device, fencing: newer)
            try await nowOrNever("held nowhere")
            #expect(try await store.pushLog().map(\.state) == [.pending, .expired])
        }
    }

    /// A token keeps its newest 1,000 pushes pending: a provider sending to a device that never
    /// comes back fills no more than that (APNs keeps one; bgd keeps the newest per collapse id),
    /// cut back as the pushes arrive, not only at the pruner's hourly pass.
    @Test(arguments: Backend.available)
    func aTokenKeepsItsNewestPendingPushes(_ backend: Backend) async throws {
        try await withStore(backend) { store in
            let token = String(repeating: "b2", count: 32)
            let owner = try await registeredOwner(store, token: token)
            let otherToken = String(repeating: "c3", count: 32)
            try await store.register(token: otherToken, topic: topic, device: owner.device, now: now)
            let other = try #require(try await store.tokenOwner(otherToken))
            _ = try await store.commit(
                (0..<(pendingPerToken + 5)).map { push(owner, token: token, id: "flood-\($0)") }
                    + (0..<3).map { push(other, token: otherToken, id: "other-\($0)") },
                now: now, connected: { _ in false })
            // Cut as they came: the pruner's pass finds nothing more to do.
            let report = try await store.prune(now: now.addingTimeInterval(60), holdFor: 86400, keepEnded: 86400, forgetAfter: 1e9)
            #expect(report == RelayPruneReport())
            let log = try await store.pushLog()
            #expect(log.filter { $0.state == .replaced }.map(\.apnsID) == (0..<5).map { "flood-\($0)" }, "the oldest")
            #expect(log.filter { $0.state == .pending }.count == pendingPerToken + 3, "another token's are its own")
            #expect(try await store.prune(now: now.addingTimeInterval(120), holdFor: 86400, keepEnded: 86400, forgetAfter: 1e9) == RelayPruneReport())
        }
    }

    /// A provider's pushes one request at a time (one commit each, as the provider side makes
    /// them) to a device that never comes back: the token never holds more than its cap and the
    /// cut's stride, with no pruner's pass at all, and the newest stay. Before, the cap came
    /// only with the hourly pass: 72,000 pushes an hour at the flood limit.
    @Test(arguments: Backend.available)
    func aTokenFloodedOneCommitAtATimeStaysNearItsCap(_ backend: Backend) async throws {
        try await withStore(backend) { store in
            let token = String(repeating: "b3", count: 32)
            let owner = try await registeredOwner(store, token: token)
            var most = 0
            for i in 0..<(pendingPerToken + 300) {
                _ = try await store.commit([push(owner, token: token, id: "one-\(i)")], now: now, connected: { _ in false })
                if i % 50 == 0 || i >= pendingPerToken + 250 {
                    most = max(most, try await store.pushCounts()[.pending] ?? 0)
                }
            }
            #expect(most < pendingPerToken + PendingTrim.every, "at most \(most) pending")
            let log = try await store.pushLog()
            let pending = log.filter { $0.state == .pending }.map(\.apnsID)
            #expect(pending.last == "one-\(pendingPerToken + 299)", "the newest stays")
            #expect(log.filter { $0.state == .replaced }.map(\.apnsID).first == "one-0", "the oldest went")
        }
    }

    /// A device keeps its newest 1,000 ended pushes, however young the older ones: the week
    /// `--keep-history` keeps is otherwise millions of rows, with payloads, at a provider's rate.
    @Test(arguments: Backend.available)
    func aDeviceKeepsItsNewestEndedPushes(_ backend: Backend) async throws {
        try await withStore(backend) { store in
            let token = String(repeating: "d4", count: 32)
            let owner = try await registeredOwner(store, token: token)
            let sent = pendingPerToken + endedPerDevice + 10
            _ = try await store.commit(
                (0..<sent).map { push(owner, token: token, id: "flood-\($0)") }, now: now, connected: { _ in false })
            // The oldest were replaced (ended) as they came, a token's pending being capped; of
            // those, the oldest go beyond the device's cap.
            let report = try await store.prune(
                now: now.addingTimeInterval(60), holdFor: 86400, keepEnded: 86400, forgetAfter: 1e9)
            #expect(report == RelayPruneReport(deleted: 10))
            let log = try await store.pushLog()
            #expect(log.filter { $0.state == .replaced }.map(\.apnsID) == (10..<(endedPerDevice + 10)).map { "flood-\($0)" })
            #expect(log.filter { $0.state == .pending }.count == pendingPerToken, "what waits is never deleted")
        }
    }

    /// A device that never comes back leaves nothing pending for ever, and what ended is kept
    /// for `keepEnded` and then forgotten; what still waits for its device is never deleted.
    @Test(arguments: Backend.available)
    func thePrunerEndsWhatCanNoLongerBeDeliveredAndForgetsWhatEndedLongAgo(_ backend: Backend) async throws {
        try await withStore(backend) { store in
            let token = String(repeating: "a1", count: 32)
            let owner = try await registeredOwner(store, token: token)
            let device = owner.device
            let hour: TimeInterval = 3600
            _ = try await store.commit(
                [
                    push(owner, token: token, id: "delivered"),
                    push(owner, token: token, id: "expires-in-an-hour", expiration: now.addingTimeInterval(hour)),
                    push(owner, token: token, id: "held-without-expiration"),
                    push(owner, token: token, id: "expires-in-a-week", expiration: now.addingTimeInterval(7 * 24 * hour)),
                ], now: now, connected: { _ in false })
            let fencing = try await store.claim(device: device, node: "a", now: now)
            let first = try #require(try await store.pendingPushes(of: device, excluding: [], fencing: fencing, now: now).first)
            _ = try await store.deliver(first.seq, device: device, fencing: fencing, now: now)
            let (holdFor, keepEnded) = (48 * hour, 24 * hour)
            func states() async throws -> [String: RelayPushState] {
                Dictionary(uniqueKeysWithValues: try await store.pushLog().map { ($0.apnsID, $0.state) })
            }

            // Within the grace after its expiration a push is left alone (it may be in flight).
            #expect(try await store.prune(now: now.addingTimeInterval(hour + 30), holdFor: holdFor, keepEnded: keepEnded, forgetAfter: 1e9)
                == RelayPruneReport())
            // Two hours on: the first expired; the delivered one is kept for a day.
            #expect(try await store.prune(now: now.addingTimeInterval(2 * hour), holdFor: holdFor, keepEnded: keepEnded, forgetAfter: 1e9)
                == RelayPruneReport(expired: 1, deleted: 0))
            #expect(try await states() == [
                "delivered": .delivered, "expires-in-an-hour": .expired, "held-without-expiration": .pending,
                "expires-in-a-week": .pending,
            ])
            // A day and a bit: the delivered one is forgotten; the expired one (ended later) stays.
            #expect(try await store.prune(now: now.addingTimeInterval(25 * hour), holdFor: holdFor, keepEnded: keepEnded, forgetAfter: 1e9)
                == RelayPruneReport(expired: 0, deleted: 1))
            // One more, a day later, waits its own hold.
            _ = try await store.commit(
                [push(owner, token: token, id: "a-day-later")], now: now.addingTimeInterval(24 * hour),
                connected: { _ in false })
            // Past the hold: the one without an expiration ends, and so does the one whose
            // expiration is a week away (the hold bounds every push: a provider cannot make one
            // wait for ever by naming a far expiration).
            #expect(try await store.prune(now: now.addingTimeInterval(49 * hour), holdFor: holdFor, keepEnded: keepEnded, forgetAfter: 1e9)
                == RelayPruneReport(expired: 2, deleted: 1))
            #expect(try await states() == [
                "held-without-expiration": .expired, "expires-in-a-week": .expired, "a-day-later": .pending,
            ])
            #expect(try await store.pushCounts() == [.expired: 2, .pending: 1])
            // The pending one is still the device's to take.
            let newer = try await store.claim(device: device, node: "a", now: now)
            #expect(try await store.pendingPushes(of: device, excluding: [], fencing: newer, now: now.addingTimeInterval(49 * hour))
                .map(\.apnsID) == ["a-day-later"])
            // Many ended ones (each replaced by the next with its collapse id) go in batches, a
            // thousand per transaction, until none is left.
            _ = try await store.commit(
                (0..<2_500).map { push(owner, token: token, id: "bulk-\($0)", collapse: "bulk") },
                now: now.addingTimeInterval(49 * hour), connected: { _ in false })
            #expect(try await store.prune(now: now.addingTimeInterval(80 * hour), holdFor: holdFor, keepEnded: keepEnded, forgetAfter: 1e9)
                == RelayPruneReport(expired: 1, deleted: 2 + 2_499))
            #expect(try await store.pushCounts() == [.expired: 1, .pending: 1])
        }
    }

    /// Two nodes commit pushes with the same collapse id for one device at the same moment: one
    /// stays pending, as on one node. Before, each transaction's replacement missed the other's
    /// uncommitted push (READ COMMITTED), and both waited for the device.
    @Test(.enabled(if: TestPostgres.isAvailable, "needs PostgreSQL: eval \"$(Tests/Postgres/start.sh)\" (CI does)"))
    func twoNodesCollapsingAtOnceLeaveOnePushPending() async throws {
        let url = try await TestPostgres.makeDatabase()
        let nodes = try (0..<2).map { _ in try PostgresRelayStore(url: url, logger: Logger(label: "test")) }
        let pools = nodes.map { node in Task { await node.runPool() } }
        defer { for pool in pools { pool.cancel() } }
        try await nodes[0].prepare()
        let token = String(repeating: "ab", count: 32)
        let owner = try await registeredOwner(nodes[0], token: token)
        var doubled = 0
        for round in 0..<40 {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for (index, node) in nodes.enumerated() {
                    let accepted = push(owner, token: token, id: "\(round)-\(index)", collapse: "score")
                    group.addTask { _ = try await node.commit([accepted], now: now, connected: { _ in true }) }
                }
                try await group.waitForAll()
            }
            if try await nodes[0].pushCounts()[.pending] != 1 { doubled += 1 }
        }
        #expect(doubled == 0, "\(doubled) of 40 rounds left two pushes with one collapse id pending")
    }

    /// A connection left inside a transaction (a client hung between two statements) would hold
    /// the row locks of the pushes it read FOR UPDATE for good, and every read SKIP LOCKED pass
    /// over them: the server is told to end such a session.
    @Test(.enabled(if: TestPostgres.isAvailable, "needs PostgreSQL: eval \"$(Tests/Postgres/start.sh)\" (CI does)"))
    func theServerEndsASessionLeftInATransaction() async throws {
        let store = try PostgresRelayStore(url: try await TestPostgres.makeDatabase(), logger: Logger(label: "test"))
        let pool = Task { await store.runPool() }
        defer { pool.cancel() }
        try await store.prepare()
        var timeout = ""
        for try await value in try await store.client.query(
            "SHOW idle_in_transaction_session_timeout", logger: Logger(label: "test")
        ).decode(String.self) { timeout = value }
        #expect(timeout == "30s")
    }

    /// A database one schema step behind (written by the relay before the now-or-never column)
    /// takes that step alone: the earlier statements would take every table's locks again
    /// while the older nodes work on it. (An index the earlier statements make, dropped here,
    /// shows whether they ran.)
    @Test(.enabled(if: TestPostgres.isAvailable, "needs PostgreSQL: eval \"$(Tests/Postgres/start.sh)\" (CI does)"))
    func aSchemaOneStepBehindTakesThatStepAlone() async throws {
        let store = try PostgresRelayStore(url: try await TestPostgres.makeDatabase(), logger: Logger(label: "test"))
        let pool = Task { await store.runPool() }
        defer { pool.cancel() }
        let logger = Logger(label: "test")
        try await store.prepare()
        try await store.client.query("ALTER TABLE relay_push DROP COLUMN now_or_never", logger: logger)
        try await store.client.query("DROP INDEX relay_device_last_seen", logger: logger)
        try await store.prepare()
        var (column, index) = (false, false)
        for try await found in try await store.client.query(
            """
            SELECT EXISTS (SELECT 1 FROM information_schema.columns
                WHERE table_name = 'relay_push' AND column_name = 'now_or_never'),
            to_regclass('relay_device_last_seen') IS NOT NULL
            """, logger: logger
        ).decode((Bool, Bool).self) { (column, index) = found }
        #expect(column, "the step taken")
        #expect(!index, "the statements before it ran again")
    }

    @Test func linesAreSplitAndALongOneIsRefused() throws {
        var splitter = UplinkLines(limit: 8)
        #expect(try splitter.append("ab\ncd".utf8) == [Array("ab".utf8)])
        #expect(splitter.remainder == Array("cd".utf8))
        #expect(try splitter.append("e\n\n".utf8) == [Array("cde".utf8), []])
        #expect(throws: UplinkLines.TooLong.self) { try splitter.append("123456789".utf8) }
    }

    @Test func framesRoundTripAndStrangersAreNone() {
        let frames: [UplinkFrame] = [
            .register(token: "t", topic: topic), .revoke(token: "t", atMilliseconds: 5), .ack(seq: 9),
            .ready(device: "d"), .refused(code: "c", reason: "r"), .closing(code: "superseded", reason: "r"),
            .push(
                RelayedPush(
                    seq: 1, token: "t", topic: topic, apnsID: "i", pushType: "background", priority: 5,
                    collapseID: nil, expirationMilliseconds: 7, payload: Data("{}".utf8))),
        ]
        for frame in frames { #expect(UplinkFrame.decode(frame.encoded()) == frame) }
        for line in ["", "{}", #"{"type":"explode"}"#, #"{"type":"ack"}"#, #"{"type":"ack","seq":"x"}"#, "[1]"] {
            #expect(UplinkFrame.decode(Data(line.utf8)) == nil, "\(line)")
        }
    }
}
