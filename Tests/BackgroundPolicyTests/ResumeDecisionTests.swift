import BackgroundModel
import BackgroundPolicy
import Foundation
import Testing

/// The resume procedure of resume.md, rule by rule.
struct ResumeDecisionTests {
    let tag = "\"v1\""
    var partial: DownloadCheckpoint { DownloadCheckpoint(offset: 1000, total: 5000, validator: .entityTag(tag)) }

    @Test func resumesOnlyWithAStrongValidator() {
        #expect(partial.requestHeaders.contains { $0 == ("Range", "bytes=1000-") })
        #expect(partial.requestHeaders.contains { $0 == ("If-Range", tag) })
        let noValidator = DownloadCheckpoint(offset: 1000, total: 5000, validator: nil)
        #expect(!noValidator.requestHeaders.contains { $0.0 == "Range" || $0.0 == "If-Range" })
        #expect(partial.requestHeaders.contains { $0 == ("Accept-Encoding", "identity") })
    }

    @Test func aWeakTagIsNoValidator() {
        #expect(ResponseHead(status: 200, entityTag: "W/\"v1\"").strongValidator == nil)
        #expect(ResponseHead(status: 200, entityTag: tag).strongValidator == .entityTag(tag))
        // A Last-Modified a second or more before Date is strong; the same second is not.
        let date = "Sun, 22 Nov 2026 02:00:10 GMT"
        #expect(
            ResponseHead(status: 200, lastModified: "Sun, 22 Nov 2026 02:00:00 GMT", date: date).strongValidator
                == .lastModified("Sun, 22 Nov 2026 02:00:00 GMT"))
        #expect(ResponseHead(status: 200, lastModified: date, date: date).strongValidator == nil)
    }

    @Test func appendsOnAMatching206() {
        let head = ResponseHead(status: 206, contentRange: "bytes 1000-4999/5000", entityTag: tag)
        #expect(
            ResumeDecision.decide(head, checkpoint: partial)
                == .write(from: 1000, checkpoint: partial, restarted: false))
    }

    /// T2: a 200 to a Range request means start over, never append.
    @Test func a200StartsOver() {
        let head = ResponseHead(status: 200, contentLength: 5000, entityTag: tag)
        guard case .write(let from, let checkpoint, let restarted) = ResumeDecision.decide(head, checkpoint: partial)
        else {
            Issue.record("expected a write")
            return
        }
        #expect(from == 0 && restarted && checkpoint.offset == 0 && checkpoint.total == 5000)
    }

    /// T3, T5, T11: any mismatch in a 206 — start, total, validator, encoding — discards the body.
    @Test(arguments: [
        ResponseHead(status: 206, contentRange: "bytes 900-4999/5000", entityTag: "\"v1\""),
        ResponseHead(status: 206, contentRange: "bytes 1000-5999/6000", entityTag: "\"v1\""),
        ResponseHead(status: 206, contentRange: "bytes 1000-4999/5000", entityTag: "\"v2\""),
        ResponseHead(status: 206, contentRange: "bytes 1000-4999/5000", entityTag: "W/\"v1\""),
        ResponseHead(status: 206, contentRange: "bytes 1000-4999/5000", entityTag: "\"v1\"", contentEncoding: "gzip"),
        ResponseHead(status: 206, contentRange: "garbage", entityTag: "\"v1\""),
        ResponseHead(status: 206, contentRange: nil, entityTag: "\"v1\""),
        ResponseHead(status: 206, contentRange: "bytes 1000-5000/5000", entityTag: "\"v1\""),
    ])
    func aMismatched206IsNeverAppended(head: ResponseHead) {
        guard case .discardAndRestart = ResumeDecision.decide(head, checkpoint: partial) else {
            Issue.record("\(head) was not discarded: \(ResumeDecision.decide(head, checkpoint: partial))")
            return
        }
    }

    /// T6: a 416 completes only a download whose stored bytes are provably the whole body.
    @Test func a416CompletesOnlyWhatIsComplete() {
        let complete = DownloadCheckpoint(offset: 5000, total: 5000, validator: .entityTag(tag))
        #expect(
            ResumeDecision.decide(ResponseHead(status: 416, contentRange: "bytes */5000"), checkpoint: complete)
                == .alreadyComplete)
        #expect(
            ResumeDecision.decide(
                ResponseHead(status: 416, contentRange: "bytes */5000", entityTag: tag), checkpoint: complete)
                == .alreadyComplete)
        for head in [
            ResponseHead(status: 416, contentRange: "bytes */6000"), ResponseHead(status: 416),
            ResponseHead(status: 416, contentRange: "bytes */5000", entityTag: "\"v2\""),
        ] {
            guard case .discardAndRestart = ResumeDecision.decide(head, checkpoint: complete) else {
                Issue.record("\(head)")
                continue
            }
        }
        guard
            case .discardAndRestart = ResumeDecision.decide(
                ResponseHead(status: 416, contentRange: "bytes */5000"), checkpoint: partial)
        else {
            Issue.record("a 416 on a partial download must restart")
            return
        }
    }

    @Test func transientAndPermanentStatuses() {
        #expect(
            ResumeDecision.decide(ResponseHead(status: 503, retryAfter: "120"), checkpoint: partial)
                == .retry(reason: "HTTP 503", retryAfter: "120"))
        #expect(
            ResumeDecision.decide(ResponseHead(status: 429), checkpoint: partial)
                == .retry(reason: "HTTP 429", retryAfter: nil))
        guard case .fail(let error) = ResumeDecision.decide(ResponseHead(status: 404), checkpoint: partial) else {
            Issue.record("404 must fail")
            return
        }
        #expect(error.code == .httpError)
    }

    /// Property: over many random responses, bytes are appended at a non-zero offset only when
    /// every condition of resume.md holds.
    @Test func neverAppendsUnlessEverythingMatches() {
        var generator = SystemRandomNumberGenerator()
        let tags = ["\"v1\"", "\"v2\"", "W/\"v1\"", nil]
        for _ in 0..<5000 {
            let start = [Int64(0), 999, 1000, 1001].randomElement(using: &generator)!
            let total = [Int64(5000), 4000, 6000].randomElement(using: &generator)!
            let range =
                Bool.random(using: &generator)
                ? "bytes \(start)-\(total - 1)/\(total)" : "bytes \(start)-\(total - 1)/*"
            let head = ResponseHead(
                status: [200, 206, 206, 416].randomElement(using: &generator)!, contentRange: range,
                entityTag: tags.randomElement(using: &generator)!,
                contentEncoding: [nil, "gzip", "identity"].randomElement(using: &generator)!)
            if case .write(let from, _, _) = ResumeDecision.decide(head, checkpoint: partial), from > 0 {
                #expect(
                    head.status == 206 && start == 1000 && (total == 5000 || range.hasSuffix("/*"))
                        && head.entityTag == tag)
                #expect(head.contentEncoding != "gzip")
            }
        }
    }
}

struct RetryBackoffTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)
    let backoff = RetryBackoff(base: .seconds(2), maximum: .seconds(600))

    @Test func doublesWithJitterUpToTheMaximum() {
        #expect(backoff.delay(afterFailures: 1, retryAfter: nil, jitter: 0, now: now) == .seconds(1))
        #expect(backoff.delay(afterFailures: 1, retryAfter: nil, jitter: 0.999_999, now: now) < .seconds(2))
        #expect(backoff.delay(afterFailures: 4, retryAfter: nil, jitter: 0, now: now) == .seconds(8))
        #expect(backoff.delay(afterFailures: 40, retryAfter: nil, jitter: 0.5, now: now) == .seconds(450))
    }

    /// A 203 (a 200 a proxy passed on) and a 204 (an empty body) are the whole body, as curl
    /// takes them; a 3xx that is no redirect (300, 304) fails at once. Before, all were retried
    /// as unexpected until the transfer failed for want of progress a day later.
    @Test func otherWholeBodiesAndDeadEndRedirects() {
        let partial = DownloadCheckpoint(offset: 500, total: 1000, validator: .entityTag("\"v1\""))
        for status in [203, 204] {
            #expect(
                ResumeDecision.decide(ResponseHead(status: status, contentLength: 0), checkpoint: partial)
                    == .write(
                        from: 0, checkpoint: DownloadCheckpoint(offset: 0, total: 0, validator: nil), restarted: true),
                "\(status)")
        }
        for status in [300, 304, 305] {
            guard case .fail(let error) = ResumeDecision.decide(ResponseHead(status: status), checkpoint: partial)
            else {
                Issue.record("\(status) must fail")
                continue
            }
            #expect(error.code == .httpError && error.message.contains("\(status)"))
        }
    }

    /// One list of answers worth trying again, for downloads (ResumeDecision) and uploads
    /// (TransferEngine) alike.
    @Test func retryableStatuses() {
        for status in [408, 429, 500, 502, 503, 504, 599] {
            #expect(ResumeDecision.isRetryable(status: status), "\(status)")
        }
        for status in [200, 206, 301, 400, 401, 403, 404, 410, 416, 600] {
            #expect(!ResumeDecision.isRetryable(status: status), "\(status)")
        }
    }

    /// The jitter is a stable hash: the same transfer and failure give the same delay, and
    /// transfers that failed together spread over the window.
    @Test func jitterIsStableAndSpreads() {
        let a = RetryBackoff.jitter(for: TransferID(7), afterFailures: 3)
        #expect(a == RetryBackoff.jitter(for: TransferID(7), afterFailures: 3))
        #expect(a != RetryBackoff.jitter(for: TransferID(7), afterFailures: 4))
        let spread = (1...1000).map { RetryBackoff.jitter(for: TransferID(Int64($0)), afterFailures: 1) }
        #expect(spread.allSatisfy { $0 >= 0 && $0 < 1 })
        for decile in 0..<10 {
            let count = spread.filter { Int($0 * 10) == decile }.count
            #expect((70...130).contains(count), "decile \(decile): \(count) of 1000")
        }
    }

    /// T8: Retry-After is obeyed, in seconds or as a date, and clamped to 30 s…24 h.
    @Test func obeysRetryAfterWithinBounds() {
        #expect(backoff.delay(afterFailures: 1, retryAfter: "120", jitter: 0, now: now) == .seconds(120))
        #expect(backoff.delay(afterFailures: 1, retryAfter: "1", jitter: 0, now: now) == .seconds(30))
        #expect(backoff.delay(afterFailures: 1, retryAfter: "9999999", jitter: 0, now: now) == .seconds(86400))
        #expect(
            backoff.delay(
                afterFailures: 1, retryAfter: HTTPDate.format(now.addingTimeInterval(300)), jitter: 0, now: now)
                == .seconds(300))
        #expect(backoff.delay(afterFailures: 1, retryAfter: "soon", jitter: 0, now: now) == .seconds(1))
    }
}
