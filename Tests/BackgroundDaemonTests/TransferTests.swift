import BackgroundDaemon
import BackgroundModel
import BackgroundPolicy
import BackgroundTesting
import Foundation
import NIOHTTP1
import Testing

/// Transfers against a real origin on loopback, through an in-process bgd on a virtual clock:
/// the faults of reliability-matrix T1–T13.
@Suite(.timeLimit(.minutes(5)))
struct TransferTests {
    static let start = Date(timeIntervalSince1970: 1_767_603_600)
    /// Small checkpoints, so a drop in a few MiB shows resuming from one.
    /// The read timeout is the real-time guard against stalls; tests other than the stall test
    /// keep it long, so a busy machine does not cause extra attempts.
    static func transfers(
        readTimeout: Duration = .seconds(20), checkpointInterval: Int64 = 256 << 10
    ) -> TransferService.Configuration {
        TransferService.Configuration(
            backoff: RetryBackoff(base: .seconds(2), maximum: .seconds(60), retryAfterRange: 30...86400),
            engine: .init(checkpointInterval: checkpointInterval, readTimeout: readTimeout, connectTimeout: .seconds(1))
        )
    }
    static let transfers = transfers()

    /// Runs `body` with an origin and a daemon (its transfers' configuration as `adjusting` leaves
    /// it), and stops both.
    func withOrigin<T: Sendable>(
        readTimeout: Duration = .seconds(20), checkpointInterval: Int64 = 256 << 10,
        adjusting adjust: (inout TransferService.Configuration) -> Void = { _ in },
        _ body: @Sendable (FaultyOrigin, TestDaemon) async throws -> T
    ) async throws -> T {
        let origin = try await FaultyOrigin.start()
        var configuration = Self.transfers(readTimeout: readTimeout, checkpointInterval: checkpointInterval)
        adjust(&configuration)
        do {
            let result = try await TestDaemon.with(clock: ManualClock(now: Self.start), transfers: configuration) {
                daemon in
                try await body(origin, daemon)
            }
            await origin.stop()
            return result
        } catch {
            await origin.stop()
            throw error
        }
    }

    /// Submits an operator download into the daemon's directory; returns its id and path.
    func download(_ url: URL, _ daemon: TestDaemon, sha256: String? = nil) async throws -> (TransferRecord, String) {
        let path = daemon.directory + "/out-\(UUID().uuidString.prefix(6))"
        let record = try await daemon.admin.send(
            .post, "/v1/transfers", body: TransferRequest(session: "test", url: url, sha256: sha256, destination: path),
            as: TransferRecord.self)
        return (record, path)
    }

    /// Waits for the transfer to end, advancing the virtual clock to each retry it schedules.
    /// Subscribes before looking, so nothing that happens in between is missed.
    func waitForEnd(_ id: TransferID, _ daemon: TestDaemon, maximumRetries: Int = 10) async throws -> TransferRecord {
        var retries = 0
        var activities = daemon.activity.subscribe().makeAsyncIterator()
        let current = try await daemon.admin.send(.get, "/v1/transfers/\(id)", as: TransferRecord.self)
        if current.state.isFinal { return current }
        if current.state == .waiting, let at = current.nextAttemptAt, at > daemon.clock.now {
            daemon.clock.advance(to: at)
        }
        while let activity = await activities.next() {
            switch activity {
            case .transferEnded(let record) where record.id == id:
                return record
            case .transferRetryScheduled(let transfer, let at, _) where transfer == id:
                retries += 1
                #expect(retries <= maximumRetries, "too many retries")
                if retries > maximumRetries {
                    return try await daemon.admin.send(.get, "/v1/transfers/\(id)", as: TransferRecord.self)
                }
                daemon.clock.advance(to: at)
            default:
                continue
            }
        }
        throw CancellationError()
    }

    /// The first retry the transfer submitted by `submit` schedules.
    func firstRetry(
        _ daemon: TestDaemon, after submit: () async throws -> TransferRecord
    ) async throws -> (TransferRecord, Date, String) {
        var activities = daemon.activity.subscribe().makeAsyncIterator()
        let record = try await submit()
        while let activity = await activities.next() {
            if case .transferRetryScheduled(let id, let at, let reason) = activity, id == record.id {
                return (record, at, reason)
            }
        }
        throw CancellationError()
    }

    func sha256(ofFile path: String) throws -> String {
        let data = try Data(contentsOf: URL(fileURLWithPath: path))
        return FaultyOrigin.sha256Digest(of: data)
    }

    @Test func aDownloadCompletesWithTheRightBytes() async throws {
        try await withOrigin { origin, daemon in
            let size = 3 << 20
            let (record, path) = try await download(origin.url(seed: 1, size: size), daemon)
            let ended = try await waitForEnd(record.id, daemon)
            #expect(ended.state == .completed, "\(ended)")
            #expect(ended.bytesTransferred == Int64(size))
            #expect(try sha256(ofFile: path) == FaultyOrigin.sha256(seed: 1, size: size))
            #expect(origin.requests.allSatisfy { $0.acceptEncoding == "identity" })
        }
    }

    /// T1, T10: the connection drops mid-body; the retry resumes from the durable checkpoint
    /// with Range and If-Range, and re-fetches less than one checkpoint interval.
    @Test func aDroppedConnectionResumesFromTheCheckpoint() async throws {
        try await withOrigin { origin, daemon in
            let size = 4 << 20
            let (record, path) = try await download(
                origin.url(seed: 2, size: size, faults: ["drop-after": "1500000", "times": "1"]), daemon)
            let ended = try await waitForEnd(record.id, daemon)
            #expect(ended.state == .completed, "\(ended)")
            #expect(ended.restarts == 0 && ended.attempts == 2)
            #expect(try sha256(ofFile: path) == FaultyOrigin.sha256(seed: 2, size: size))
            // Every byte bgd received before the drop was kept: the retry asks from there (the
            // bytes the server sent but the client never read are all that is fetched twice).
            let resumed = try #require(origin.requests.last)
            let from = Int(resumed.range?.dropFirst("bytes=".count).prefix { $0 != "-" } ?? "") ?? -1
            #expect(from > 0 && from <= 1_500_000, "\(resumed)")
            #expect(resumed.ifRange == "\"s2\"")
            #expect(origin.bytesServed - size == 1_500_000 - from)
        }
    }

    /// T2: a server that ignores Range sends the whole body again: start over, never append.
    @Test func aServerIgnoringRangeMeansStartingOver() async throws {
        try await withOrigin { origin, daemon in
            let size = 2 << 20
            let url = origin.url(
                seed: 3, size: size, faults: ["drop-after": "1000000", "times": "1", "ignore-range": "1"])
            let (record, path) = try await download(url, daemon)
            let ended = try await waitForEnd(record.id, daemon)
            #expect(ended.state == .completed && ended.restarts == 1, "\(ended)")
            #expect(try sha256(ofFile: path) == FaultyOrigin.sha256(seed: 3, size: size))
        }
    }

    /// T3: the content changed between attempts: If-Range fails, the new version comes whole —
    /// never a file mixed from two versions.
    @Test func changedContentIsNeverMixed() async throws {
        try await withOrigin { origin, daemon in
            let size = 2 << 20
            let url = origin.url(
                seed: 4, size: size, faults: ["drop-after": "1000000", "times": "1", "etag": "rotate"])
            let (record, path) = try await download(url, daemon)
            let ended = try await waitForEnd(record.id, daemon)
            #expect(ended.state == .completed && ended.restarts == 1, "\(ended)")
            // Version 2 (the second request) whole.
            #expect(try sha256(ofFile: path) == FaultyOrigin.sha256(seed: 4 + 2, size: size))
        }
    }

    /// T4: a weak tag (or none) cannot guard a resume: the retry asks for everything.
    @Test(arguments: ["weak", "none"])
    func withoutAStrongValidatorTheRetryStartsOver(etag: String) async throws {
        try await withOrigin { origin, daemon in
            let size = 2 << 20
            let url = origin.url(seed: 5, size: size, faults: ["drop-after": "1000000", "times": "1", "etag": etag])
            let (record, path) = try await download(url, daemon)
            let ended = try await waitForEnd(record.id, daemon)
            #expect(ended.state == .completed, "\(ended)")
            #expect(origin.requests.allSatisfy { $0.range == nil && $0.ifRange == nil })
            #expect(try sha256(ofFile: path) == FaultyOrigin.sha256(seed: 5, size: size))
        }
    }

    /// T5: a 206 whose Content-Range does not start at the checkpoint is not written.
    @Test func aWrongContentRangeIsRejected() async throws {
        try await withOrigin { origin, daemon in
            let size = 2 << 20
            let url = origin.url(
                seed: 6, size: size, faults: ["drop-after": "1000000", "times": "1", "wrong-content-range": "1"])
            let (record, path) = try await download(url, daemon)
            let ended = try await waitForEnd(record.id, daemon)
            #expect(ended.state == .completed && ended.restarts == 1, "\(ended)")
            #expect(try sha256(ofFile: path) == FaultyOrigin.sha256(seed: 6, size: size))
        }
    }

    /// T8: 503 with Retry-After: the next attempt comes when the server said (clamped to ≥ 30 s).
    @Test(arguments: [("120", 120.0), ("5", 30.0)])
    func retryAfterIsObeyed(retryAfter: String, expected: Double) async throws {
        try await withOrigin { origin, daemon in
            let url = origin.url(
                seed: 7, size: 100_000, faults: ["status": "503", "retry-after": retryAfter, "times": "1"])
            let (record, at, _) = try await firstRetry(daemon) { try await download(url, daemon).0 }
            #expect(at == Self.start.addingTimeInterval(expected))
            #expect(try await waitForEnd(record.id, daemon).state == .completed)
        }
    }

    /// T9: at most 5 redirects; a longer chain fails for good.
    @Test func redirectsAreFollowedUpToFive() async throws {
        try await withOrigin { origin, daemon in
            let (short, _) = try await download(origin.url(seed: 8, size: 1000, faults: ["redirect": "2"]), daemon)
            #expect(try await waitForEnd(short.id, daemon).state == .completed)
            let (long, _) = try await download(origin.url(seed: 8, size: 1000, faults: ["redirect": "6"]), daemon)
            let ended = try await waitForEnd(long.id, daemon)
            #expect(ended.state == .failed && ended.error?.code == .tooManyRedirects, "\(ended)")

            // A Location NIO cannot connect to (a port above 65535 trapped bgd, at every start
            // while the transfer was stored) or a scheme not http(s) fails for good (cycles and
            // the method's change: RedirectsTests).
            let refusals: [(String, TransferError.Code, String)] = [
                ("http://127.0.0.1:99999/x", .badURL, "a port is 1 to 65535"),
                ("http://[::1]:70000/x", .badURL, "a port is 1 to 65535"),
                ("file:///etc/passwd", .badURL, "http or https"),
            ]
            for (location, code, says) in refusals {
                let (bad, _) = try await download(
                    origin.url(seed: 8, size: 1000, faults: ["location": location]), daemon)
                let refused = try await waitForEnd(bad.id, daemon)
                #expect(refused.state == .failed && refused.error?.code == code, "\(location): \(refused)")
                #expect(refused.error?.message.contains(says) == true, "\(location): \(refused)")
            }
            let (fine, _) = try await download(origin.url(seed: 8, size: 1000, faults: ["redirect": "1"]), daemon)
            #expect(try await waitForEnd(fine.id, daemon).state == .completed, "bgd is still there and fetching")
        }
    }

    /// T11: a body claiming gzip is never stored as if it were the bytes asked for.
    @Test func anEncodedBodyIsNotStored() async throws {
        try await withOrigin { origin, daemon in
            let path = daemon.directory + "/gzip"
            let url = origin.url(seed: 9, size: 10_000, faults: ["gzip": "1"])
            let (_, _, reason) = try await firstRetry(daemon) {
                try await daemon.admin.send(
                    .post, "/v1/transfers", body: TransferRequest(session: "test", url: url, destination: path),
                    as: TransferRecord.self)
            }
            #expect(reason.contains("Content-Encoding"))
            #expect(!FileManager.default.fileExists(atPath: path))
        }
    }

    /// T12: the app's SHA-256 does not match: failed once, nothing left behind.
    @Test func aChecksumMismatchFails() async throws {
        try await withOrigin { origin, daemon in
            let wrong = FaultyOrigin.sha256(seed: 99, size: 10_000)
            let (record, path) = try await download(origin.url(seed: 10, size: 10_000), daemon, sha256: wrong)
            let ended = try await waitForEnd(record.id, daemon)
            #expect(ended.state == .failed && ended.error?.code == .checksumMismatch, "\(ended)")
            #expect(!FileManager.default.fileExists(atPath: path))
            let right = FaultyOrigin.sha256(seed: 10, size: 10_000)
            let (good, goodPath) = try await download(origin.url(seed: 10, size: 10_000), daemon, sha256: right)
            #expect(try await waitForEnd(good.id, daemon).state == .completed)
            #expect(FileManager.default.fileExists(atPath: goodPath))
        }
    }

    /// A retry waits for time that really passes: the clock set back a day after it was
    /// scheduled does not put it off a day (the store's date alone would).
    @Test func theClockSetBackDoesNotPutARetryOff() async throws {
        try await withOrigin { origin, daemon in
            let url = origin.url(seed: 7, size: 100_000, faults: ["status": "503", "times": "1"])
            let (record, at, _) = try await firstRetry(daemon) { try await download(url, daemon).0 }
            let wait = at.duration(since: daemon.clock.now)
            // The transfers' loop sleeps until the retry (the soonest of anything in bgd) before
            // the clock is set back: a wait for the date alone would then be a day away.
            #expect(await eventually { abs(daemon.clock.nextDeadline?.timeIntervalSince(at) ?? 1) < 0.01 })
            daemon.clock.jump(by: .seconds(-86_400))
            let ended = try await daemon.waitFor(
                { activity -> TransferRecord? in
                    if case .transferEnded(let ended) = activity, ended.id == record.id { return ended }
                    return nil
                }, after: { daemon.clock.advance(by: wait) })
            #expect(ended.state == .completed, "\(ended)")
        }
    }

    /// T13: nobody listening: a transient error, retried with backoff; then it comes up.
    @Test func aRefusedConnectionIsRetried() async throws {
        try await TestDaemon.with(clock: ManualClock(now: Self.start), transfers: Self.transfers) { daemon in
            let url = URL(string: "http://127.0.0.1:9/files/1/100")!  // discard port: nothing listens
            let (record, at, _) = try await firstRetry(daemon) { try await download(url, daemon).0 }
            #expect(at > Self.start && at <= Self.start.addingTimeInterval(2))
            let waiting = try await daemon.admin.send(.get, "/v1/transfers/\(record.id)", as: TransferRecord.self)
            #expect(waiting.state == .waiting && waiting.lastError != nil && waiting.nextAttemptAt == at)
        }
    }

    /// T7: a body that stalls is dropped by the read timeout and resumed.
    @Test func aStalledBodyIsRetried() async throws {
        try await withOrigin(readTimeout: .seconds(1)) { origin, daemon in
            let size = 1 << 20
            let url = origin.url(seed: 11, size: size, faults: ["stall-after": "300000", "times": "1"])
            let (record, path) = try await download(url, daemon)
            let ended = try await waitForEnd(record.id, daemon)
            // At least one retry; a busy machine may make the 1 s read timeout fire once more.
            #expect(
                ended.state == .completed && ended.attempts >= 2 && ended.lastError?.contains("readTimeout") == true,
                "\(ended)")
            #expect(try sha256(ofFile: path) == FaultyOrigin.sha256(seed: 11, size: size))
        }
    }

    @Test func withoutANetworkTransfersWait() async throws {
        try await withOrigin { origin, daemon in
            _ = try await daemon.admin.send(
                .put, "/v1/env", body: ConditionOverrides(network: DeviceConditions.Network.none),
                as: ConditionsReport.self)
            // Subscribed before the transfer exists: the hold is announced once, as it is committed
            // (before, nothing was emitted, and a look that came before the hold waited for good).
            var activities = daemon.activity.subscribe().makeAsyncIterator()
            let (record, path) = try await download(origin.url(seed: 12, size: 1000), daemon)
            while let activity = await activities.next() {
                if case .transferHeld(let id, let reason) = activity, id == record.id {
                    #expect(reason == "waiting for a network")
                    break
                }
            }
            #expect(
                try await daemon.admin.send(.get, "/v1/transfers/\(record.id)", as: TransferRecord.self).waitingReason
                    == "waiting for a network")
            #expect(origin.requests.isEmpty)
            _ = try await daemon.admin.send(.delete, "/v1/env", as: ConditionsReport.self)
            #expect(try await waitForEnd(record.id, daemon).state == .completed)
            #expect(FileManager.default.fileExists(atPath: path))
        }
    }

    @Test func badTransferRequestsChangeNothing() async throws {
        try await withOrigin { origin, daemon in
            let bodies = [
                #"{"session": "s", "url": "file:///etc/passwd", "destination": "/tmp/x"}"#,
                #"{"session": "", "url": "http://127.0.0.1/x", "destination": "/tmp/x"}"#,
                #"{"session": "s", "url": "http://127.0.0.1/x"}"#,
                #"{"session": "s", "url": "http://127.0.0.1/x", "destination": "relative/path"}"#,
                #"{"session": "s", "url": "http://127.0.0.1/x", "destination": "/no/such/dir/x"}"#,
                #"{"session": "s", "url": "http://127.0.0.1/x", "sha256": "abc", "destination": "/tmp/x"}"#,
                #"{"session": "s", "kind": "upload", "url": "http://127.0.0.1/x", "destination": "/tmp/x"}"#,
                #"{"session": "s", "url": 5}"#, "not json",
            ]
            for body in bodies {
                let answer = try await RawHTTP.request(daemon.socketPath, .POST, "/v1/transfers", body: Data(body.utf8))
                #expect(answer.status == 400, "\(body): \(answer.status)")
            }
            for path in ["/v1/transfers/0", "/v1/transfers/abc", "/v1/transfers/99"] {
                let answer = try await RawHTTP.request(daemon.socketPath, .GET, path)
                #expect([400, 404].contains(answer.status), "\(path)")
            }
            #expect(try await daemon.admin.send(.get, "/v1/transfers", as: [TransferRecord].self).isEmpty)
        }
    }

    /// T15: an upload from a file the app may delete at once; a 503 is retried with the same
    /// Idempotency-Key, so the server can tell the duplicate.
    @Test func anUploadIsCopiedRetriedAndKeyed() async throws {
        try await withOrigin { origin, daemon in
            let source = daemon.directory + "/report.bin"
            let body = Data(FaultyOrigin.body(seed: 61, size: 700_000).readableBytesView)
            try body.write(to: URL(fileURLWithPath: source))
            let url = origin.baseURL.appendingPathComponent("upload").absoluteString + "?fail=1"
            let record = try await daemon.admin.send(
                .post, "/v1/transfers",
                body: TransferRequest(
                    session: "test", kind: .upload, url: URL(string: url)!, uploadFile: source,
                    destination: daemon.directory + "/unused"),
                as: TransferRecord.self)
            try FileManager.default.removeItem(atPath: source)  // the app may delete it: bgd has a copy
            let ended = try await waitForEnd(record.id, daemon)
            #expect(ended.state == .completed && ended.statusCode == 201 && ended.attempts == 2, "\(ended)")
            let received = try #require(origin.uploads.first)
            #expect(received.key.hasPrefix("bgd-\(record.id)-") && received.value.count == 2)
            #expect(received.value.allSatisfy { $0 == body })
        }
    }

    /// A discretionary transfer waits for mains power; others do not.
    @Test func aDiscretionaryTransferWaitsForPower() async throws {
        try await withOrigin { origin, daemon in
            _ = try await daemon.admin.send(
                .put, "/v1/env", body: ConditionOverrides(power: .battery, batteryLevel: 60), as: ConditionsReport.self)
            let url = origin.url(seed: 62, size: 1000)
            let patient = try await daemon.admin.send(
                .post, "/v1/transfers",
                body: TransferRequest(
                    session: "t", url: url, isDiscretionary: true, destination: daemon.directory + "/a"),
                as: TransferRecord.self)
            let (urgent, _) = try await download(url, daemon)
            #expect(try await waitForEnd(urgent.id, daemon).state == .completed)
            let waiting = try await daemon.admin.send(.get, "/v1/transfers/\(patient.id)", as: TransferRecord.self)
            #expect(
                waiting.state == .waiting && waiting.waitingReason == "discretionary: waiting for mains power",
                "\(waiting)")
            _ = try await daemon.admin.send(.delete, "/v1/env", as: ConditionsReport.self)
            #expect(try await waitForEnd(patient.id, daemon).state == .completed)
        }
    }

    /// A discretionary transfer held on battery past the no-progress timeout, whose first
    /// attempt gets an answer without bytes, is retried: the silence that fails a transfer is
    /// its attempts', not the time it was held. Before, that first answer failed it
    /// (noProgress), and while it was held the service planned again without a pause.
    @Test func timeHeldBeforeTheFirstAttemptIsNoLackOfProgress() async throws {
        try await withOrigin(adjusting: { $0.noProgressTimeout = .seconds(3600) }) { origin, daemon in
            _ = try await daemon.admin.send(
                .put, "/v1/env", body: ConditionOverrides(power: .battery, batteryLevel: 60), as: ConditionsReport.self)
            let record = try await daemon.admin.send(
                .post, "/v1/transfers",
                body: TransferRequest(
                    session: "t", url: origin.url(seed: 68, size: 1000, faults: ["status": "503", "times": "1"]),
                    isDiscretionary: true, destination: daemon.directory + "/held"),
                as: TransferRecord.self)
            try await daemon.waitUntil {
                try await daemon.admin.send(.get, "/v1/transfers/\(record.id)", as: TransferRecord.self).state
                    == .waiting
            }
            daemon.clock.advance(by: .seconds(2 * 3600))
            _ = try await daemon.admin.send(.delete, "/v1/env", as: ConditionsReport.self)
            let ended = try await waitForEnd(record.id, daemon)
            #expect(ended.state == .completed && ended.attempts == 2, "\(ended)")
        }
    }

    /// timeoutIntervalForResource: a transfer that cannot finish in time fails with timedOut.
    @Test func theResourceTimeoutFailsATransfer() async throws {
        try await withOrigin { origin, daemon in
            let url = origin.url(seed: 63, size: 1000, faults: ["status": "503", "retry-after": "600"])
            let record = try await daemon.admin.send(
                .post, "/v1/transfers",
                body: TransferRequest(
                    session: "t", url: url, timeoutForResource: .seconds(3600), destination: daemon.directory + "/b"),
                as: TransferRecord.self)
            let ended = try await waitForEnd(record.id, daemon, maximumRetries: 20)
            #expect(ended.state == .failed && ended.error?.code == .timedOut, "\(ended)")
            #expect(ended.finishedAt == Self.start.addingTimeInterval(3600))
        }
    }

    /// A transfer that moves no byte for the no-progress timeout fails with noProgress, with the
    /// last error as the reason.
    @Test func noProgressFailsATransfer() async throws {
        try await withOrigin(adjusting: { $0.noProgressTimeout = .seconds(3600) }) { origin, daemon in
            let (record, _) = try await download(
                origin.url(seed: 65, size: 1000, faults: ["status": "503", "retry-after": "600"]), daemon)
            let ended = try await waitForEnd(record.id, daemon, maximumRetries: 20)
            #expect(ended.state == .failed && ended.error?.code == .noProgress, "\(ended)")
            #expect(ended.error?.message.contains("HTTP 503") == true)
            #expect(ended.finishedAt == Self.start.addingTimeInterval(3600))
        }
    }

    /// T1/T7: a server that answers every attempt and drops the connection before the first
    /// byte moves nothing: the retries back off (2, 4, 8 … 60 s) and the no-progress timeout
    /// fails the transfer. Before, the checkpoint saved as each answer's headers arrived counted
    /// as progress: every retry came after the first backoff (1–2 s), and noProgress never came.
    @Test func answersWithoutBytesAreNoProgress() async throws {
        try await withOrigin(adjusting: { $0.noProgressTimeout = .seconds(600) }) { origin, daemon in
            var activities = daemon.activity.subscribe().makeAsyncIterator()
            let (record, _) = try await download(
                origin.url(seed: 67, size: 100_000, faults: ["drop-after": "0"]), daemon)
            var delays: [TimeInterval] = []
            var ended: TransferRecord?
            while ended == nil, delays.count <= 30, let activity = await activities.next() {
                switch activity {
                case .transferRetryScheduled(let id, let at, _) where id == record.id:
                    delays.append(at.timeIntervalSince(daemon.clock.now))
                    daemon.clock.advance(to: at)
                case .transferEnded(let done) where done.id == record.id:
                    ended = done
                default:
                    continue
                }
            }
            // Each delay is the backoff's window (2 s doubling, at most 60 s) times 0.5–1.
            #expect(delays.count >= 4 && delays[3] >= 8 && delays.suffix(3).allSatisfy { $0 >= 30 }, "\(delays)")
            #expect(ended?.state == .failed && ended?.error?.code == .noProgress, "\(String(describing: ended))")
            #expect(ended?.attempts ?? 0 > 1 && ended?.bytesTransferred == 0)
        }
    }

    /// The wall clock set two days ahead (an NTP step, a user) fails no transfer for lack of
    /// progress: the timeout counts time that really passed (reliability-matrix D14; the chaos
    /// campaign's faketime lives failed six this way). Nor does it bring the retry sooner: that
    /// waits for its 600 s to pass.
    @Test func aClockJumpIsNoLackOfProgress() async throws {
        try await withOrigin(adjusting: { $0.noProgressTimeout = .seconds(3600) }) { origin, daemon in
            let (record, _, _) = try await firstRetry(daemon) {
                try await download(
                    origin.url(seed: 66, size: 1000, faults: ["status": "503", "retry-after": "600"]), daemon
                ).0
            }
            let next = try await daemon.waitFor(
                { activity -> String? in
                    switch activity {
                    case .transferRetryScheduled(let id, _, _) where id == record.id: return "retry"
                    case .transferEnded(let ended) where ended.id == record.id:
                        return "ended \(ended.error?.code.rawValue ?? "-")"
                    default: return nil
                    }
                },
                after: {
                    daemon.clock.jump(by: .seconds(2 * 86400))
                    daemon.clock.advance(by: .seconds(600))
                })
            #expect(next == "retry")
        }
    }

    /// cancel(byProducingResumeData:) keeps the bytes — every byte received, not only those up to
    /// the last checkpoint (here a checkpoint would come only every 64 MiB); resuming carries on
    /// from them.
    @Test func pauseAndResumeKeepTheBytes() async throws {
        try await withOrigin(checkpointInterval: 64 << 20) { origin, daemon in
            let app = try await daemon.register("com.example.pauser", command: ["/bin/true"], interval: .never)
            let size = 3 << 20
            let url = origin.url(seed: 64, size: size, faults: ["rate": String(1 << 20)])
            let body = try JSONEncoder().encode(TransferRequest(session: "s", url: url))
            let created = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers", body: body, token: app.token)
            let id = try #require(created.json["id"] as? Int)
            await origin.waitUntilServed(1 << 20)
            let paused = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers/\(id)/pause", token: app.token)
            let kept = try #require(paused.json["bytesTransferred"] as? Int)
            #expect(paused.status == 200 && kept > 0, "\(paused.json)")
            let state = try await daemon.admin.send(.get, "/v1/transfers/\(id)", as: TransferRecord.self)
            #expect(state.state == .paused && state.waitingReason == "paused by the app", "\(state)")
            let resumed = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers/\(id)/resume", token: app.token)
            #expect(resumed.status == 200)
            // `bgctl transfers pause` is the operator's: bgctl transfers must not blame the app.
            _ = try await daemon.admin.send(.post, "/v1/transfers/\(id)/pause", as: TransferResumeData.self)
            let byOperator = try await daemon.admin.send(.get, "/v1/transfers/\(id)", as: TransferRecord.self)
            #expect(byOperator.waitingReason == "paused by the operator", "\(byOperator)")
            _ = try await daemon.admin.send(.post, "/v1/transfers/\(id)/resume", as: TransferRecord.self)
            let ended = try await waitForEnd(TransferID(Int64(id)), daemon)
            #expect(ended.state == .completed && ended.restarts == 0, "\(ended)")
            let range = origin.requests.last?.range ?? ""
            #expect(range.hasPrefix("bytes=") && (Int(range.dropFirst(6).prefix { $0 != "-" }) ?? 0) >= kept)
        }
    }

    /// T6: bgd stopped after the last bytes were synced but before the file was moved into place:
    /// the server answers the resume with 416 for exactly the stored size, and the download
    /// completes without fetching a byte and without writing the 416's body.
    @Test func a416OnACompleteDownloadCompletesIt() async throws {
        try await withOrigin { origin, daemon in
            let size = 200_000
            let partial = daemon.directory + "/complete.partial"
            let destination = daemon.directory + "/complete.bin"
            let stored = try await daemon.store.createTransfer(
                TransferRequest(session: "test", url: origin.url(seed: 81, size: size), destination: destination),
                app: nil,
                now: Self.start
            ) { _ in (partial, destination) }
            try Data(FaultyOrigin.body(seed: 81, size: size).readableBytesView).write(to: URL(fileURLWithPath: partial))
            try await daemon.store.saveCheckpoint(
                stored.record.id,
                DownloadCheckpoint(offset: Int64(size), total: Int64(size), validator: .entityTag("\"s81\"")),
                restarted: false, now: Self.start)
            // Anything that makes the service plan again picks it up, as a restart would: here,
            // another (empty) download.
            let (other, _) = try await download(origin.url(seed: 82, size: 0), daemon)
            let ended = try await waitForEnd(stored.record.id, daemon)
            _ = try await waitForEnd(other.id, daemon)
            #expect(ended.state == .completed, "\(ended)")
            #expect(origin.requests.filter { $0.path.contains("/81/") }.map(\.status) == [416])
            #expect(origin.bytesServed == 0)
            #expect(try sha256(ofFile: destination) == FaultyOrigin.sha256(seed: 81, size: size))
        }
    }

    /// The bandwidth cap holds two downloads together under the rate (a lower bound on real time:
    /// pacing is real-time behaviour, like a read timeout).
    @Test func theBandwidthCapIsShared() async throws {
        try await withOrigin(adjusting: { $0.engine.bandwidthLimit = 1 << 20 }) { origin, daemon in
            let began = ContinuousClock.now
            let (first, _) = try await download(origin.url(seed: 91, size: 1 << 20), daemon)
            let (second, _) = try await download(origin.url(seed: 92, size: 1 << 20), daemon)
            #expect(try await waitForEnd(first.id, daemon).state == .completed)
            #expect(try await waitForEnd(second.id, daemon).state == .completed)
            #expect(ContinuousClock.now - began >= .milliseconds(1700), "2 MiB at 1 MiB/s")
        }
    }

    /// P17: names from the URL cannot leave the app's directory, and the server's
    /// Content-Disposition is never used.
    @Test func namesCannotEscape() {
        for raw in [
            "http://h/..%2F..%2F.bashrc", "http://h/a/%2E%2E", "http://h/", "http://h/..", "http://h/%00x",
            "http://h/a%2Fb",
        ] {
            let name = TransferService.safeName(for: URL(string: raw)!)
            #expect(!name.contains("/") && !name.hasPrefix(".") && !name.isEmpty, "\(raw) → \(name)")
        }
    }
}

/// `bgctl download`, `bgctl transfers`, `bgctl transfers cancel` against a live daemon.
@Suite(.timeLimit(.minutes(5)))
struct TransferCommandTests {
    func bgctl(_ arguments: [String], _ daemon: TestDaemon) async throws -> Command.Output {
        try await Command.run(try BuiltProducts.path(of: "bgctl"), arguments + ["--socket", daemon.socketPath])
    }

    /// `download --app` goes to the session the app's transfers use (an app hears of a download
    /// only in the session it opens), said on stderr; none known: "bgctl", said too.
    @Test func anAppsDownloadGoesToItsSession() async throws {
        try await TestDaemon.with { daemon in
            try await daemon.register("com.example.sessions", command: ["/bin/true"], interval: .never)
            try await daemon.register("com.example.fresh", command: ["/bin/true"], interval: .never)
            _ = try await daemon.admin.send(
                .post, "/v1/transfers?app=com.example.sessions",
                body: TransferRequest(
                    session: "12345", url: URL(string: "http://127.0.0.1:9/first")!, waitsForConnectivity: true),
                as: TransferRecord.self)
            let known = try await bgctl(
                ["download", "http://127.0.0.1:9/second", "--app", "com.example.sessions", "--no-wait", "--json"],
                daemon)
            let record = try WireCoding.makeDecoder().decode(TransferRecord.self, from: Data(known.standardOutput.utf8))
            #expect(record.session == "12345", "\(known)")
            #expect(known.standardError.contains("background session 12345"), "\(known.standardError)")
            let unknown = try await bgctl(
                ["download", "http://127.0.0.1:9/third", "--app", "com.example.fresh", "--no-wait", "--json"], daemon)
            let fresh = try WireCoding.makeDecoder().decode(
                TransferRecord.self, from: Data(unknown.standardOutput.utf8))
            #expect(fresh.session == "bgctl" && unknown.standardError.contains("no background session bgd knows of"))
            // Once the app has a session of its own, that one: "bgctl" was this command's fallback.
            _ = try await daemon.admin.send(
                .post, "/v1/transfers?app=com.example.fresh",
                body: TransferRequest(session: "own", url: URL(string: "http://127.0.0.1:9/fourth")!),
                as: TransferRecord.self)
            let own = try await bgctl(
                ["download", "http://127.0.0.1:9/fifth", "--app", "com.example.fresh", "--no-wait", "--json"], daemon)
            #expect(own.status == 0, "\(own)")
            #expect(
                try WireCoding.makeDecoder().decode(TransferRecord.self, from: Data(own.standardOutput.utf8)).session
                    == "own")
        }
    }

    /// A download `bgctl download` watches is paused by someone else: the command stops
    /// watching and says how to carry it on (exit 5). Before, it watched a bar at 0 B/s for as
    /// long as bgd kept the paused transfer (30 days).
    @Test func aWatchedDownloadPausedElsewhereEndsTheWatch() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with { daemon in
            let url = origin.url(seed: 42, size: 8 << 20, faults: ["rate": String(256 << 10)])
            let watching = Task {
                try await bgctl(["download", url.absoluteString, "--to", daemon.directory + "/slow.bin"], daemon)
            }
            await origin.waitUntilServed(1)
            let transfer = try #require(
                try await daemon.admin.send(.get, "/v1/transfers", as: [TransferRecord].self).first)
            _ = try await daemon.admin.send(
                .post, "/v1/transfers/\(transfer.id)/pause", as: TransferResumeData.self)
            let watched = try await watching.value
            #expect(watched.status == 5, "\(watched.standardError)")
            #expect(
                watched.standardError.contains("was paused; bgctl transfers resume \(transfer.id)"),
                "\(watched.standardError)")
        }
    }

    @Test func downloadListAndCancel() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with { daemon in
            let path = daemon.directory + "/file.bin"
            let done = try await bgctl(
                ["download", origin.url(seed: 41, size: 300_000).absoluteString, "--to", path], daemon)
            #expect(done.status == 0, "\(done.standardError)")
            #expect(done.standardOutput.contains("done"), "\(done.standardOutput)")
            // As curl and aria2 users expect: what and where before the bar, size, time and
            // average speed at the end.
            #expect(
                done.standardError.contains("→ \(path)") && done.standardError.contains("Transfer "),
                "\(done.standardError)")
            #expect(
                done.standardOutput.contains("293.0 KiB in") && done.standardOutput.contains("/s average"),
                "\(done.standardOutput)")
            #expect(
                FaultyOrigin.sha256Digest(of: try Data(contentsOf: URL(fileURLWithPath: path)))
                    == FaultyOrigin.sha256(seed: 41, size: 300_000))
            // The operator's file gets the mode the user's files get (0644 under a 022 umask), not 0600.
            let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
            #expect(mode == 0o666 & ~Self.umask(), "mode \(String(mode ?? 0, radix: 8))")

            let handed = try await bgctl(
                ["download", "http://127.0.0.1:9/never", "--to", daemon.directory + "/never", "--no-wait", "--json"],
                daemon)
            let record = try WireCoding.makeDecoder().decode(
                TransferRecord.self, from: Data(handed.standardOutput.utf8))
            let list = try await bgctl(["transfers"], daemon)
            #expect(
                list.standardOutput.contains("completed") && list.standardOutput.contains("http://127.0.0.1:9/never"))
            // Paused and resumed by the operator, as an app can.
            let paused = try await bgctl(["transfers", "pause", record.id.description], daemon)
            #expect(paused.status == 0 && paused.standardOutput.contains("paused"), "\(paused.standardError)")
            #expect(try await bgctl(["transfers", "--full"], daemon).standardOutput.contains("paused by the operator"))
            let resumed = try await bgctl(["transfers", "resume", record.id.description], daemon)
            #expect(resumed.status == 0 && !resumed.standardOutput.contains("paused"), "\(resumed.standardOutput)")
            let cancelled = try await bgctl(["transfers", "cancel", record.id.description], daemon)
            #expect(
                cancelled.status == 0 && cancelled.standardOutput.contains("cancelled"), "\(cancelled.standardOutput)")
            let listed = try await bgctl(["transfers", "--full"], daemon).standardOutput
            #expect(listed.contains("cancelled") && !listed.contains("cancelled: cancelled"), "\(listed)")

            // Each refused with its own status (README, "bgctl"): usage 64, no such transfer 3.
            for (arguments, status) in [
                (["download", "ftp://example.com/x"], Int32(64)), (["download", "not a url"], 64),
                (["download", "http://127.0.0.1:9/x", "--sha256", "xyz"], 64),
                (["download", "http://127.0.0.1:9/x", "--session", "s1"], 64),
                (["transfers", "cancel", "999"], 3), (["transfers", "pause", "999"], 3),
                (["transfers", "resume", "999"], 3), (["transfers", "retry", "999"], 3),
                (["transfers", "retry", "x"], 64),
            ] {
                let refused = try await bgctl(arguments, daemon)
                #expect(refused.status == status && !refused.standardError.isEmpty, "\(arguments): \(refused)")
                if status == 3 {
                    #expect(refused.standardError.contains("no transfer 999"), "\(arguments): \(refused)")
                }
            }
            // --to a directory: the file goes in it under the URL's name; a trailing slash says
            // "directory" even for one that is not there (refused, no file made for it).
            let into = daemon.directory + "/into"
            try FileManager.default.createDirectory(atPath: into, withIntermediateDirectories: false)
            let small = origin.url(seed: 44, size: 1000)
            let saved = try await bgctl(["download", small.absoluteString, "--to", into], daemon)
            #expect(saved.status == 0, "\(saved)")
            #expect(FileManager.default.fileExists(atPath: into + "/" + small.lastPathComponent))
            let missing = try await bgctl(
                ["download", small.absoluteString, "--to", daemon.directory + "/nodir/"], daemon)
            #expect(missing.status != 0, "\(missing)")
            #expect(
                !FileManager.default.fileExists(atPath: daemon.directory + "/nodir"), "no file named as the directory")
            let completedAgain = try await bgctl(["transfers", "retry", "1"], daemon)
            #expect(
                completedAgain.status == 4 && completedAgain.standardError.contains("completed"), "\(completedAgain)")
            let cancelCompleted = try await bgctl(["transfers", "cancel", "1"], daemon)
            #expect(
                cancelCompleted.status == 4 && cancelCompleted.standardError.contains("had already ended (completed)"),
                "\(cancelCompleted)")
            let cancelCompletedJSON = try await bgctl(["transfers", "cancel", "1", "--json"], daemon)
            #expect(
                cancelCompletedJSON.status == 4
                    && cancelCompletedJSON.standardError.contains(#""error":"transferNotActive""#),
                "\(cancelCompletedJSON)")
        }
    }

    /// The real bgd sets its own umask to 077 (its store and logs are the user's alone); the
    /// operator's download still gets the mode from the umask bgd was started with, as a file
    /// `curl -o` writes would (0644 under 022), not 0600.
    @Test func aRealBgdGivesTheOperatorsDownloadTheUsersMode() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let daemon = try await DaemonProcess(stateDirectory: directory + "/state", socketPath: directory + "/bgd.sock")
        let path = directory + "/file.bin"
        let done = try await Command.run(
            try BuiltProducts.path(of: "bgctl"),
            [
                "download", origin.url(seed: 43, size: 100_000).absoluteString, "--to", path, "--socket",
                daemon.socketPath,
            ])
        #expect(done.status == 0, "\(done.standardError)")
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(
            mode == 0o666 & ~Self.umask(),
            "mode \(String(mode ?? 0, radix: 8)), umask \(String(Self.umask(), radix: 8))")
        // bgd's own files stay the user's alone.
        let store =
            try FileManager.default.attributesOfItem(atPath: directory + "/state/bgd.sqlite")[.posixPermissions] as? Int
        #expect(store == 0o600)
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit() == 0)
    }

    /// At a terminal, a host that refuses fails the download at once (as curl does) and bgd keeps
    /// nothing waiting; `--retry-forever` leaves it to bgd; `transfers retry` makes a waiting one
    /// go now and starts a failed one again as a new transfer.
    @Test func interactiveDownloadsFailFastAndRetryStartsAgain() async throws {
        // A short connect timeout for the durable attempts, which retry the refused port until it.
        try await TestDaemon.with(transfers: .init(engine: .init(connectTimeout: .seconds(1)))) { daemon in
            let refused = try await bgctl(
                ["download", "http://127.0.0.1:9/nothing", "--to", daemon.directory + "/a"], daemon)
            #expect(refused.status == 5, "\(refused)")
            #expect(
                refused.standardError.contains("cannotConnect: connection refused")
                    && refused.standardError.contains("--retry-forever"))
            let failed = try await records(daemon)
            #expect(failed.count == 1 && failed[0].state == .failed && failed[0].attempts == 1, "\(failed)")

            // Started again: a new transfer of the same URL and destination (which fails fast again).
            let again = try await bgctl(["transfers", "retry", failed[0].id.description], daemon)
            #expect(again.status == 0 && again.standardOutput.contains("as transfer 2"), "\(again)")
            let both = try await records(daemon)
            #expect(both.first { $0.id.rawValue == 2 }?.url == failed[0].url)
            #expect(both.first { $0.id.rawValue == 2 }?.destination == failed[0].destination)

            // Durable: bgd keeps retrying with backoff; retry makes it go now.
            var activities = daemon.activity.subscribe().makeAsyncIterator()
            let durable = try await bgctl(
                [
                    "download", "http://127.0.0.1:9/later", "--to", daemon.directory + "/b", "--retry-forever",
                    "--no-wait", "--json",
                ],
                daemon)
            let id = try WireCoding.makeDecoder().decode(TransferRecord.self, from: Data(durable.standardOutput.utf8))
                .id
            var retriesScheduled = 0
            while retriesScheduled < 1, let activity = await activities.next() {
                if case .transferRetryScheduled(id, _, _) = activity { retriesScheduled += 1 }
            }
            let waiting = try await daemon.admin.send(.get, "/v1/transfers/\(id)", as: TransferRecord.self)
            #expect(
                waiting.state == .waiting && (waiting.nextAttemptAt ?? .distantPast) > daemon.clock.now, "\(waiting)")
            let now = try await bgctl(["transfers", "retry", id.description], daemon)
            #expect(now.status == 0 && now.standardOutput.contains("retrying now"), "\(now)")
            // The clock has not moved: only the retry asked for can make the second attempt.
            while retriesScheduled < 2, let activity = await activities.next() {
                if case .transferRetryScheduled(id, _, _) = activity { retriesScheduled += 1 }
            }
            let retried = try await daemon.admin.send(.get, "/v1/transfers/\(id)", as: TransferRecord.self)
            #expect(retried.state == .waiting && retried.attempts == 2, "still durable: \(retried)")

            // Cancelled while bgctl watches it: a transfer's own status, and "cancelled" said once.
            let watched = Task {
                try await bgctl(
                    ["download", "http://127.0.0.1:9/cancelled", "--to", daemon.directory + "/c", "--retry-forever"],
                    daemon)
            }
            var watchedID: TransferID?
            while watchedID == nil, let activity = await activities.next() {
                if case .transferRetryScheduled(let started, _, _) = activity, started != id { watchedID = started }
            }
            let cancel = try await bgctl(["transfers", "cancel", try #require(watchedID).description], daemon)
            #expect(cancel.status == 0, "\(cancel)")
            let ended = try await watched.value
            #expect(ended.status == 5, "\(ended)")
            #expect(ended.standardError.contains("transfer \(watchedID!) cancelled"), "\(ended.standardError)")
            #expect(!ended.standardError.contains("cancelled: cancelled"), "\(ended.standardError)")
        }
    }

    private func records(_ daemon: TestDaemon) async throws -> [TransferRecord] {
        let listed = try await bgctl(["transfers", "--json"], daemon)
        return try WireCoding.makeDecoder().decode([TransferRecord].self, from: Data(listed.standardOutput.utf8))
    }

    static func umask() -> Int {
        let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
        let line = status.split(separator: "\n").first { $0.hasPrefix("Umask:") } ?? "Umask: 022"
        return Int(line.dropFirst(6).trimmingCharacters(in: .whitespaces), radix: 8) ?? 0o022
    }
}
