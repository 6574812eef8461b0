import BackgroundModel
import Foundation

/// How background pushes become wakes: a few per hour per app (Apple: "two or three per hour"),
/// bursts coalesced so the app wakes once with the newest payload, expired pushes dropped. Pure:
/// the gateway keeps the state in the store and asks this at `now`.
public struct PushThrottle: Hashable, Sendable {
    /// Wakes an app may get per hour from pushes, and how many may come back to back.
    public var wakesPerHour: Double
    public var burst: Double

    public init(wakesPerHour: Double = 3, burst: Double = 2) {
        self.wakesPerHour = max(0.01, wakesPerHour)
        self.burst = max(1, burst)
    }

    /// The app's allowance: tokens left and when they were counted.
    public struct Allowance: Hashable, Codable, Sendable {
        public var tokens: Double
        public var at: Date
        public init(tokens: Double, at: Date) {
            self.tokens = tokens
            self.at = at
        }
    }

    public enum Decision: Hashable, Sendable {
        /// Wake the app now; the allowance after spending one.
        case wakeNow(Allowance)
        /// Hold until `until` (the next token); a newer push for the same app and collapse id replaces it.
        case hold(until: Date, Allowance)
        /// Drop it: its `apns-expiration` has passed (or was 0 and it cannot go now).
        case expired
    }

    /// The allowance refilled up to `now`.
    public func refilled(_ allowance: Allowance?, now: Date) -> Allowance {
        guard let allowance else { return Allowance(tokens: burst, at: now) }
        let elapsed = max(0, now.timeIntervalSince(allowance.at))
        return Allowance(tokens: min(burst, allowance.tokens + elapsed * wakesPerHour / 3600), at: max(now, allowance.at))
    }

    /// What to do with the oldest waiting push of an app at `now`.
    public func decide(expiration: Date?, allowance: Allowance?, now: Date) -> Decision {
        let current = refilled(allowance, now: now)
        if current.tokens >= 1 {
            if let expiration, expiration != Date(timeIntervalSince1970: 0), expiration < now { return .expired }
            return .wakeNow(Allowance(tokens: current.tokens - 1, at: now))
        }
        // 0: "deliver once": now or never.
        if let expiration, expiration == Date(timeIntervalSince1970: 0) || expiration <= now { return .expired }
        let wait = (1 - current.tokens) * 3600 / wakesPerHour
        let until = now.addingTimeInterval(wait)
        if let expiration, expiration < until { return .expired }
        return .hold(until: until, current)
    }
}
