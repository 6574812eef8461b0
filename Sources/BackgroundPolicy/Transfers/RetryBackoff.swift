import BackgroundModel
import Foundation

/// When a failed attempt is tried again: exponential backoff with jitter, or the server's
/// `Retry-After`, clamped (Android clamps to 30 s…24 h; a server cannot park a transfer forever
/// nor make us hammer it).
public struct RetryBackoff: Hashable, Sendable {
    /// The delay after the first failure; it doubles with each consecutive one.
    public var base: Duration
    public var maximum: Duration
    /// `Retry-After` is held within these bounds.
    public var retryAfterRange: ClosedRange<Double>

    public init(
        base: Duration = .seconds(2), maximum: Duration = .seconds(600),
        retryAfterRange: ClosedRange<Double> = 30...86400
    ) {
        self.base = base
        self.maximum = maximum
        self.retryAfterRange = retryAfterRange
    }

    /// The delay before attempt `failures + 1`, after `failures` consecutive failures (≥ 1).
    /// `jitter` in [0, 1) picks a point in the upper half of the window ("equal jitter"), so
    /// clients that failed together do not come back together, and none comes back at once.
    public func delay(afterFailures failures: Int, retryAfter: String?, jitter: Double, now: Date) -> Duration {
        if let retryAfter, let seconds = Self.seconds(fromRetryAfter: retryAfter, now: now) {
            return .seconds(min(max(seconds, retryAfterRange.lowerBound), retryAfterRange.upperBound))
        }
        let exponent = min(max(failures - 1, 0), 30)
        let window = min(base.seconds * pow(2, Double(exponent)), maximum.seconds)
        return .seconds(window * (0.5 + 0.5 * min(max(jitter, 0), 1)))
    }

    /// The jitter for `transfer`'s attempt after `failures` failures: a stable hash of the two,
    /// in [0, 1). Transfers that failed together spread out, and the same failure always gets
    /// the same delay — a decision a test (or a replay) can reproduce, never a dice roll.
    public static func jitter(for transfer: TransferID, afterFailures failures: Int) -> Double {
        var hash = StableHash.fnv1a("\(transfer.rawValue):\(failures)")
        // Finish with a mix (splitmix64's) so that nearby ids land far apart.
        hash = (hash ^ (hash >> 30)) &* 0xbf58_476d_1ce4_e5b9
        hash = (hash ^ (hash >> 27)) &* 0x94d0_49bb_1331_11eb
        hash ^= hash >> 31
        return Double(hash >> 11) / Double(UInt64(1) << 53)
    }

    /// `Retry-After: 120` or `Retry-After: <HTTP date>`; nil when it is neither.
    static func seconds(fromRetryAfter text: String, now: Date) -> Double? {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        if let seconds = Int(trimmed), seconds >= 0 { return Double(seconds) }
        if let date = HTTPDate.parse(trimmed) { return max(0, date.timeIntervalSince(now)) }
        return nil
    }
}
