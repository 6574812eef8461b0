import Foundation

/// APNs' `TooManyRequests`: "too many requests were made consecutively to the same device token".
/// A token bucket per device token, so a provider stuck in a loop is told to back off before it
/// fills the queue, while a provider sending a few updates a second never notices. Pure; the
/// gateway keeps the allowances in memory (they only matter for seconds).
public struct PushFloodLimit: Hashable, Sendable {
    /// Pushes per second one device token accepts in the long run, and how many back to back.
    public var perSecond: Double
    public var burst: Double

    public init(perSecond: Double = 20, burst: Double = 200) {
        self.perSecond = max(0.001, perSecond)
        self.burst = max(1, burst)
    }

    /// Whether one more push to the token is accepted at `now`, and the allowance after it.
    /// Refused pushes cost nothing, so a provider that backs off is admitted again soon.
    public func admit(
        _ allowance: PushThrottle.Allowance?, now: Date
    ) -> (admitted: Bool, allowance: PushThrottle.Allowance) {
        var current = PushThrottle.Allowance.refilled(allowance, perSecond: perSecond, burst: burst, now: now)
        guard current.tokens >= 1 else { return (false, current) }
        current.tokens -= 1
        return (true, current)
    }

    /// The allowance with the push `admit` spent given back (it was not taken after all).
    public func refund(_ allowance: PushThrottle.Allowance) -> PushThrottle.Allowance {
        var given = allowance
        given.tokens = min(burst, given.tokens + 1)
        return given
    }

    /// Whether an allowance has refilled completely by `now` (and can be forgotten).
    public func isFull(_ allowance: PushThrottle.Allowance, now: Date) -> Bool {
        PushThrottle.Allowance.refilled(allowance, perSecond: perSecond, burst: burst, now: now).tokens >= burst
    }
}
