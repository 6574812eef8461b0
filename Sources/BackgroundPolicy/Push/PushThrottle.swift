import BackgroundModel
import Foundation

/// How background pushes become wakes: a few per hour per app (Apple: "two or three per hour"),
/// bursts coalesced so the app wakes once with the newest payload, expired pushes dropped. Pure:
/// the dispatcher keeps each app's allowance in the store and asks this at `now`.
public struct PushThrottle: Hashable, Sendable {
    /// Wakes an app may get per hour from pushes, and how many may come back to back.
    public var wakesPerHour: Double
    public var burst: Double
    /// `apns-expiration: 0`: deliver at once or not at all, never later.
    public static let nowOrNever = Date(timeIntervalSince1970: 0)

    public init(wakesPerHour: Double = 3, burst: Double = 2) {
        self.wakesPerHour = max(0.01, wakesPerHour)
        self.burst = max(1, burst)
    }

    /// The app's allowance: wakes left (fractions refill over time) and when they were counted.
    /// A token bucket; `PushFloodLimit` keeps one per device token.
    public struct Allowance: Hashable, Codable, Sendable {
        public var tokens: Double
        public var at: Date
        public init(tokens: Double, at: Date) {
            self.tokens = tokens
            self.at = at
        }

        /// `allowance` (a full bucket when nil) refilled at `perSecond` up to `burst`, as of `now`.
        static func refilled(_ allowance: Allowance?, perSecond: Double, burst: Double, now: Date) -> Allowance {
            guard let allowance else { return Allowance(tokens: burst, at: now) }
            // Stamped ahead of now, by a clock set back since: how long ago it really was is not
            // known, and it is forgiven — full. Before, it refilled nothing until the clock came
            // back to the stamp: a month's step held every background push for a month (the
            // stamp is written only when the allowance is spent, so "from now" never came). A
            // stamp a little ahead is the store's rounding to the millisecond, not a step.
            guard allowance.at.timeIntervalSince(now) <= 1 else { return Allowance(tokens: burst, at: now) }
            let elapsed = max(0, now.timeIntervalSince(allowance.at))
            return Allowance(tokens: min(burst, allowance.tokens + elapsed * perSecond), at: now)
        }
    }

    public enum Decision: Hashable, Sendable {
        /// Wake the app now; the allowance after spending one.
        case wakeNow(Allowance, DecisionReason)
        /// Hold until `until` (the next wake allowed); a newer push for the same app and collapse id replaces it.
        case hold(until: Date, Allowance, DecisionReason)
        /// Drop it: its `apns-expiration` has passed (or was 0 and it cannot go now).
        case expired(DecisionReason)
    }

    /// The allowance refilled up to `now`.
    public func refilled(_ allowance: Allowance?, now: Date) -> Allowance {
        Allowance.refilled(allowance, perSecond: wakesPerHour / 3600, burst: burst, now: now)
    }

    /// What becomes of a push whose wake was allowed while the app runs a fetch or an earlier push.
    public enum WhileAppRuns: Hashable, Sendable {
        /// It goes when that run ends.
        case waits(DecisionReason)
        /// Sent now or never (`apns-expiration: 0`): a run can hold it for its whole budget (a
        /// processing task's: minutes), so it is dropped.
        case expired(DecisionReason)
    }

    /// How long after it came a push sent `apns-expiration: 0` may still go: the dispatcher's
    /// pass right after its commit, not a later one.
    public static let nowOrNeverWindow: TimeInterval = 10

    /// Why a push sent now or never can no longer go, `receivedAt` having been a while ago (bgd
    /// restarted since it came, or the run carrying it ended before the app answered and it was
    /// queued again); nil for any other push, or one still fresh. APNs tries such a push once.
    public static func nowOrNeverLapsed(expiration: Date?, receivedAt: Date, now: Date) -> DecisionReason? {
        guard expiration == nowOrNever, now.timeIntervalSince(receivedAt) > nowOrNeverWindow else { return nil }
        return DecisionReason(
            .pushExpired,
            "apns-expiration 0 (now or never), and it came at \(WireCoding.formatSeconds(receivedAt)): too long ago to go now"
        )
    }

    /// What becomes of a push with `expiration` that finds the app running a fetch or an earlier push.
    public static func whileAppRuns(expiration: Date?) -> WhileAppRuns {
        if expiration == nowOrNever {
            return .expired(
                DecisionReason(
                    .pushExpired, "apns-expiration 0 (now or never): the app was running a fetch or an earlier push"))
        }
        return .waits(
            DecisionReason(
                .pushWaitsForRun, "the app is running a fetch or an earlier push; this one goes when that run ends"))
    }

    /// What to do with the newest waiting push of an app at `now`.
    public func decide(expiration: Date?, allowance: Allowance?, now: Date) -> Decision {
        let current = refilled(allowance, now: now)
        let rate = "\(Self.format(wakesPerHour)) an hour, \(Self.format(burst)) back to back"
        let never = Self.nowOrNever
        if current.tokens >= 1 {
            if let expiration, expiration != never, expiration < now {
                return .expired(
                    DecisionReason(
                        .pushExpired,
                        "apns-expiration \(WireCoding.formatSeconds(expiration)) passed before the app could be woken"))
            }
            let left = current.tokens - 1
            // The allowance refills in fractions; the wakes it allows now are whole ones.
            let wakes = Int(left.rounded(.down))
            return .wakeNow(
                Allowance(tokens: left, at: now),
                DecisionReason(
                    .pushWake,
                    "a background push woke the app (\(wakes) more wake\(wakes == 1 ? "" : "s") allowed now; \(rate))"))
        }
        // 0 means "deliver once": now or never.
        if let expiration, expiration == never || expiration <= now {
            let when =
                expiration == never
                ? "apns-expiration 0 (now or never)" : "apns-expiration \(WireCoding.formatSeconds(expiration))"
            return .expired(
                DecisionReason(.pushExpired, "\(when), and the app had had its push wakes for now (\(rate))"))
        }
        let wait = (1 - current.tokens) * 3600 / wakesPerHour
        let until = now.addingTimeInterval(wait)
        if let expiration, expiration < until {
            return .expired(
                DecisionReason(
                    .pushExpired,
                    "apns-expiration \(WireCoding.formatSeconds(expiration)) comes before the next wake allowed, \(WireCoding.formatSeconds(until)) (\(rate))"
                ))
        }
        return .hold(
            until: until, current,
            DecisionReason(
                .pushThrottled,
                "held until \(WireCoding.formatSeconds(until)): the app has had its push wakes for now (\(rate))"))
    }

    static func format(_ value: Double) -> String {
        value == value.rounded() ? String(Int(value)) : String(format: "%.1f", value)
    }
}
