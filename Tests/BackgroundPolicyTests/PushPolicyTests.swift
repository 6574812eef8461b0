import BackgroundModel
import BackgroundPolicy
import Foundation
import Testing

/// The provider API's request rules, one request built to cause each reason.
struct PushRequestValidatorTests {
    static let token = String(repeating: "ab", count: 32)
    static let silent = Data(#"{"aps":{"content-available":1},"content-id":42}"#.utf8)

    func validate(
        method: String = "POST", path: String = "/3/device/\(Self.token)", headers: [(String, String)] = [],
        body: Data = Self.silent,
        size: Int? = nil
    ) -> Result<ValidatedPush, APNsReason> {
        let base = [("apns-topic", "com.example.news"), ("apns-push-type", "background"), ("apns-priority", "5")]
        let names = Set(headers.map { $0.0.lowercased() })
        let merged = base.filter { !names.contains($0.0) } + headers
        return PushRequestValidator.validate(
            method: method, path: path,
            headers: merged.filter { !$0.1.isEmpty || $0.0 == "apns-topic" }.map { (name: $0.0, value: $0.1) },
            body: body, bodySize: size ?? body.count)
    }

    func reason(_ result: Result<ValidatedPush, APNsReason>) -> APNsReason? {
        if case .failure(let reason) = result { return reason }
        return nil
    }

    @Test func aSilentPushIsAccepted() throws {
        let push = try validate().get()
        #expect(push.pushType == .background && push.priority == 5 && push.topic == "com.example.news")
        #expect(push.deviceToken == Self.token)
    }

    @Test func eachRuleHasItsReason() throws {
        #expect(reason(validate(method: "GET")) == .methodNotAllowed)
        #expect(reason(validate(path: "/3/other/\(Self.token)")) == .badPath)
        #expect(reason(validate(path: "/3/device/")) == .missingDeviceToken)
        #expect(reason(validate(path: "/3/device/xyz")) == .badDeviceToken)
        #expect(reason(validate(path: "/3/device/" + String(repeating: "g", count: 64))) == .badDeviceToken)
        #expect(reason(validate(headers: [("apns-topic", "a"), ("APNS-TOPIC", "b")])) == .duplicateHeaders)
        #expect(reason(validate(body: Data(), size: 0)) == .payloadEmpty)
        #expect(reason(validate(body: Data(count: 10), size: 4097)) == .payloadTooLarge)
        #expect(reason(validate(headers: [("apns-id", "not-a-uuid")])) == .badMessageId)
        #expect(reason(validate(headers: [("apns-id", "123E4567-E89B-12D3-A456-426614174000")])) == .badMessageId)
        #expect(reason(validate(headers: [("apns-topic", "")])) == .missingTopic)
        #expect(reason(validate(headers: [("apns-collapse-id", String(repeating: "c", count: 65))])) == .badCollapseId)
        #expect(reason(validate(headers: [("apns-expiration", "tomorrow")])) == .badExpirationDate)
        #expect(reason(validate(headers: [("apns-expiration", "-5")])) == .badExpirationDate)
        // Past 9999 no store reads the date back (bgd and the relay trapped on it at every start).
        #expect(reason(validate(headers: [("apns-expiration", "253402300800")])) == .badExpirationDate)
        #expect(reason(validate(headers: [("apns-expiration", "9223372036854775807")])) == .badExpirationDate)
        #expect(try validate(headers: [("apns-expiration", "253402300799")]).get().expiration == StorableDates.latest)
        #expect(reason(validate(headers: [("apns-push-type", "telepathy")])) == .invalidPushType)
        #expect(reason(validate(headers: [("apns-priority", "10")])) == .badPriority)
        #expect(reason(validate(headers: [("apns-priority", "7")])) == .badPriority)
        #expect(reason(validate(headers: [("apns-priority", "+5")])) == .badPriority)
        #expect(reason(validate(headers: [("apns-priority", "05")])) == .badPriority)
        #expect(reason(validate(body: Data(#"{"aps":{"content-available":1.9}}"#.utf8))) == .invalidPushType)
        #expect(reason(validate(body: Data(#"{"aps":{"content-available":1,"alert":"hi"}}"#.utf8))) == .invalidPushType)
        #expect(reason(validate(body: Data(#"{"aps":{}}"#.utf8))) == .invalidPushType)
        #expect(reason(validate(body: Data("not json".utf8))) == .invalidPayload)
        #expect(reason(validate(body: Data(#"{"aps":5}"#.utf8))) == .invalidPayload)
        #expect(reason(validate(body: Data("[1,2]".utf8))) == .invalidPayload)
        #expect(reason(validate(body: Data([0x7B, 0xFF, 0xFE, 0x7D]))) == .invalidPayload)
        let deep = String(repeating: "[", count: 40) + String(repeating: "]", count: 40)
        #expect(reason(validate(body: Data(#"{"aps":{"content-available":1},"x":\#(deep)}"#.utf8))) == .invalidPayload)
    }

    /// Control characters are no topic and no collapse id (before, a topic with ESC passed as
    /// `isASCII`, and a collapse id with a newline was stored); a device token is ASCII hex, not
    /// the fullwidth digits `Character.isHexDigit` also takes.
    @Test func controlCharactersAndFullwidthDigitsAreRefused() {
        #expect(reason(validate(headers: [("apns-topic", "com.example.news\u{1B}")])) == .badTopic)
        #expect(reason(validate(headers: [("apns-topic", "com.example.news\u{01}")])) == .badTopic)
        #expect(reason(validate(headers: [("apns-collapse-id", "scores\u{0A}fake")])) == .badCollapseId)
        #expect(reason(validate(headers: [("apns-collapse-id", "scores\u{9B}")])) == .badCollapseId)
        // 61 ASCII digits and a fullwidth zero (3 bytes): 64 bytes.
        let fullwidth = String(Self.token.dropLast(3)) + "\u{FF10}"
        #expect(fullwidth.utf8.count == 64)
        #expect(reason(validate(path: "/3/device/" + fullwidth)) == .badDeviceToken)
        #expect(HexDigits.matches(Self.token.uppercased(), length: 64...64))
    }

    /// VoIP pushes may be 5120 bytes; every other type 4096 (APNs' "Sending notification requests").
    @Test func aVoIPPushMayCarryFiveKilobytes() throws {
        func push(type: String, size: Int) -> Result<ValidatedPush, APNsReason> {
            let padding = String(repeating: "x", count: size - 28)
            let body = Data(#"{"aps":{"alert":"a"},"p":"\#(padding)"}"#.utf8)
            precondition(body.count == size)
            return validate(headers: [("apns-push-type", type), ("apns-priority", "10")], body: body)
        }
        #expect(try push(type: "voip", size: 5120).get().pushType == .voip)
        #expect(reason(push(type: "voip", size: 5121)) == .payloadTooLarge)
        #expect(try push(type: "alert", size: 4096).get().pushType == .alert)
        #expect(reason(push(type: "alert", size: 4097)) == .payloadTooLarge)
    }

    @Test func alertPushesAreAcceptedAndTheTypeIsInferred() throws {
        let alert = try validate(
            headers: [("apns-push-type", ""), ("apns-priority", "")], body: Data(#"{"aps":{"alert":"hi"}}"#.utf8)
        ).get()
        #expect(alert.pushType == .alert && alert.priority == 10)
        let inferred = try validate(headers: [("apns-push-type", ""), ("apns-priority", "")]).get()
        #expect(inferred.pushType == .background && inferred.priority == 5)
    }

    @Test func statusesMatchAPNs() {
        #expect(APNsReason.badPriority.status == 400)
        #expect(APNsReason.expiredProviderToken.status == 403)
        #expect(APNsReason.badPath.status == 404)
        #expect(APNsReason.methodNotAllowed.status == 405)
        #expect(APNsReason.unregistered.status == 410)
        #expect(APNsReason.payloadTooLarge.status == 413)
        #expect(APNsReason.tooManyProviderTokenUpdates.status == 429)
    }

    /// Property: any body up to the limit with a silent aps is accepted, one byte over is refused,
    /// and no random bytes crash the validator.
    @Test func jsonLimits() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<300 {
            let size = Int.random(in: 40...4200, using: &generator)
            let prefix = #"{"aps":{"content-available":1},"p":""#
            let padding = String(repeating: "x", count: max(0, size - prefix.utf8.count - 2))
            let body = Data((prefix + padding + "\"}").utf8)
            let result = validate(body: body)
            if body.count <= 4096 {
                #expect((try? result.get()) != nil, "\(body.count)")
            } else {
                #expect(reason(result) == .payloadTooLarge)
            }
            let noise = Data(
                (0..<Int.random(in: 1...200, using: &generator)).map { _ in UInt8.random(in: 0...255, using: &generator)
                })
            _ = validate(body: noise)
        }
    }
}

struct ProviderTokenTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)

    func jwt(
        alg: String = "ES256", kid: String? = "ABC123DEFG", iss: String = "TEAM123456", iat: Double,
        signatureBytes: Int = 64
    ) -> String {
        func encode(_ object: [String: Any]) -> String {
            let data = try! JSONSerialization.data(withJSONObject: object)
            return data.base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(
                of: "/", with: "_"
            )
            .replacingOccurrences(of: "=", with: "")
        }
        var header: [String: Any] = ["alg": alg]
        if let kid { header["kid"] = kid }
        let signature = Data(repeating: 1, count: signatureBytes).base64EncodedString().replacingOccurrences(
            of: "=", with: ""
        )
        .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
        return "bearer \(encode(header)).\(encode(["iss": iss, "iat": iat])).\(signature)"
    }

    @Test func parsesAnES256Token() throws {
        let token = try ProviderToken.parse(authorization: jwt(iat: now.timeIntervalSince1970)).get()
        #expect(
            token.keyID == "ABC123DEFG" && token.teamID == "TEAM123456" && token.issuedAt == now
                && token.signature.count == 64)
    }

    @Test func refusesWhatIsNotAnES256Token() {
        func reason(_ header: String?) -> APNsReason? {
            if case .failure(let reason) = ProviderToken.parse(authorization: header) { return reason }
            return nil
        }
        #expect(reason(nil) == .missingProviderToken)
        #expect(reason("") == .missingProviderToken)
        for alg in ["none", "HS256", "RS256", "ES384"] {
            #expect(reason(jwt(alg: alg, iat: 1)) == .invalidProviderToken, "\(alg)")
        }
        #expect(reason(jwt(kid: nil, iat: 1)) == .invalidProviderToken)
        #expect(reason(jwt(iat: 1, signatureBytes: 10)) == .invalidProviderToken)
        #expect(reason("bearer a.b") == .invalidProviderToken)
        #expect(reason("basic abc") == .invalidProviderToken)
        #expect(reason("bearer " + String(repeating: "a", count: 5000)) == .invalidProviderToken)
    }

    @Test func timeRules() throws {
        var clock = ProviderTokenClock()
        func token(_ iat: Date) throws -> ProviderToken {
            try ProviderToken.parse(authorization: jwt(iat: iat.timeIntervalSince1970)).get()
        }
        #expect(throws: Never.self) { try clock.admit(try token(now), now: now).get() }
        // Reused: fine.
        #expect(throws: Never.self) { try clock.admit(try token(now), now: now.addingTimeInterval(1800)).get() }
        #expect(throws: APNsReason.tooManyProviderTokenUpdates) {
            try clock.admit(try token(now.addingTimeInterval(600)), now: now.addingTimeInterval(600)).get()
        }
        #expect(throws: Never.self) {
            try clock.admit(try token(now.addingTimeInterval(1500)), now: now.addingTimeInterval(1500)).get()
        }
        #expect(throws: APNsReason.expiredProviderToken) {
            try clock.admit(try token(now), now: now.addingTimeInterval(3601)).get()
        }
        #expect(throws: APNsReason.invalidProviderToken) {
            try clock.admit(try token(now.addingTimeInterval(300)), now: now).get()
        }
    }
}

struct PushThrottleTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)
    let throttle = PushThrottle(wakesPerHour: 3, burst: 2)

    func code(_ decision: PushThrottle.Decision) -> ReasonCode {
        switch decision {
        case .wakeNow(_, let reason), .hold(_, _, let reason), .expired(let reason): reason.code
        }
    }

    @Test func aBurstThenAFewAnHour() {
        guard case .wakeNow(let first, _) = throttle.decide(expiration: nil, allowance: nil, now: now),
            case .wakeNow(let second, _) = throttle.decide(expiration: nil, allowance: first, now: now),
            case .hold(let until, _, let reason) = throttle.decide(expiration: nil, allowance: second, now: now)
        else {
            Issue.record("expected two wakes, then a hold")
            return
        }
        #expect(until == now.addingTimeInterval(1200))  // one token every 20 minutes
        #expect(
            reason.code == .pushThrottled && reason.detail.contains("2026-01-05T09:20:00Z")
                && reason.detail.contains("3 an hour"), "\(reason)")
        guard case .wakeNow(_, let woke) = throttle.decide(expiration: nil, allowance: second, now: until) else {
            Issue.record("the held push goes when the token comes")
            return
        }
        #expect(woke.code == .pushWake)
    }

    /// The wakes left are a count: whole, and "wake" when there is one.
    @Test func wakesLeftAreAWholeCount() {
        func detail(_ allowance: PushThrottle.Allowance?) -> String {
            guard case .wakeNow(_, let reason) = throttle.decide(expiration: nil, allowance: allowance, now: now) else {
                return "no wake"
            }
            return reason.detail
        }
        #expect(detail(nil).contains("(1 more wake allowed now;"), "\(detail(nil))")
        let partly = PushThrottle.Allowance(tokens: 1.5, at: now)
        #expect(detail(partly).contains("(0 more wakes allowed now;"), "\(detail(partly))")
    }

    @Test func expiredPushesAreDropped() {
        let spent = PushThrottle.Allowance(tokens: 0, at: now)
        #expect(code(throttle.decide(expiration: now.addingTimeInterval(-1), allowance: nil, now: now)) == .pushExpired)
        #expect(
            code(throttle.decide(expiration: Date(timeIntervalSince1970: 0), allowance: spent, now: now))
                == .pushExpired)
        #expect(
            code(throttle.decide(expiration: now.addingTimeInterval(600), allowance: spent, now: now)) == .pushExpired)
        // Expiration 0 goes when it can go now; one that can wait for its wake is held.
        #expect(
            code(throttle.decide(expiration: Date(timeIntervalSince1970: 0), allowance: nil, now: now)) == .pushWake)
        #expect(
            code(throttle.decide(expiration: now.addingTimeInterval(7200), allowance: spent, now: now))
                == .pushThrottled)
    }

    /// An allowance spent while the clock ran a month ahead, the clock set right since: the
    /// time since is not known, and it is forgiven (full), not held for the month.
    @Test func aClockSetBackDoesNotHoldTheAllowance() {
        let spentAhead = PushThrottle.Allowance(tokens: 0, at: now.addingTimeInterval(30 * 86400))
        #expect(throttle.refilled(spentAhead, now: now) == PushThrottle.Allowance(tokens: 2, at: now))
        #expect(code(throttle.decide(expiration: nil, allowance: spentAhead, now: now)) == .pushWake)
    }

    /// A push sent now or never goes in the pass right after it came, or not at all: not after
    /// a restart of bgd, nor again after its run crashed.
    @Test func aNowOrNeverPushLapsesSoonAfterItCame() {
        let never = PushThrottle.nowOrNever
        #expect(
            PushThrottle.nowOrNeverLapsed(expiration: never, receivedAt: now, now: now.addingTimeInterval(5)) == nil)
        let lapsed = PushThrottle.nowOrNeverLapsed(
            expiration: never, receivedAt: now, now: now.addingTimeInterval(3600))
        #expect(lapsed?.code == .pushExpired && lapsed?.detail.contains("now or never") == true)
        #expect(
            PushThrottle.nowOrNeverLapsed(expiration: nil, receivedAt: now, now: now.addingTimeInterval(3600)) == nil)
        #expect(
            PushThrottle.nowOrNeverLapsed(
                expiration: now.addingTimeInterval(86400), receivedAt: now, now: now.addingTimeInterval(3600)) == nil)
    }

    /// A push that finds the app running waits for the run, unless it was sent now or never.
    @Test func aPushThatFindsTheAppRunningWaitsUnlessNowOrNever() {
        func code(_ outcome: PushThrottle.WhileAppRuns) -> ReasonCode {
            switch outcome {
            case .waits(let reason), .expired(let reason): reason.code
            }
        }
        #expect(code(PushThrottle.whileAppRuns(expiration: nil)) == .pushWaitsForRun)
        #expect(code(PushThrottle.whileAppRuns(expiration: now.addingTimeInterval(60))) == .pushWaitsForRun)
        #expect(code(PushThrottle.whileAppRuns(expiration: PushThrottle.nowOrNever)) == .pushExpired)
    }
}

struct PushFloodLimitTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)

    /// A burst is accepted, the next push in the same instant is not; it refills at the rate,
    /// and a refused push costs nothing.
    @Test func aBurstThenTheRate() {
        let limit = PushFloodLimit(perSecond: 10, burst: 3)
        var allowance: PushThrottle.Allowance?
        for _ in 0..<3 {
            let answer = limit.admit(allowance, now: now)
            #expect(answer.admitted)
            allowance = answer.allowance
        }
        let refused = limit.admit(allowance, now: now)
        #expect(!refused.admitted)
        #expect(!limit.admit(refused.allowance, now: now.addingTimeInterval(0.05)).admitted)
        #expect(limit.admit(refused.allowance, now: now.addingTimeInterval(0.11)).admitted)
        #expect(!limit.isFull(refused.allowance, now: now.addingTimeInterval(0.25)))
        #expect(limit.isFull(refused.allowance, now: now.addingTimeInterval(0.35)))
    }

    /// Property: over any stretch of time, no more than burst + rate × seconds pushes get in.
    @Test func neverMoreThanBurstPlusRate() {
        let limit = PushFloodLimit(perSecond: 20, burst: 50)
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<50 {
            var allowance: PushThrottle.Allowance?
            var time = now
            var admitted = 0
            for _ in 0..<2000 {
                time = time.addingTimeInterval(Double.random(in: 0...0.02, using: &generator))
                let answer = limit.admit(allowance, now: time)
                allowance = answer.allowance
                if answer.admitted { admitted += 1 }
            }
            #expect(Double(admitted) <= 50 + 20 * time.timeIntervalSince(now) + 1e-6)
        }
    }
}
