import Foundation

/// The threshold that would have spent the budget over the last `window`, fitted online.
///
/// Every wake a planner considered — which app, its score, when, and the app's last open — is
/// kept for the window. To fit, the kept candidates are replayed at a trial threshold the way the
/// planner wakes (a candidate at or above it is a wake, unless the same app woke less than
/// `rewake` before with no open since) and the lowest threshold whose wakes stay within the
/// window's budget wins, by binary search over the scores seen.
///
/// This is the online twin of the "one global threshold swept to the budget" that a study sets
/// after the fact: it only ever looks back, so it is allowed, and it lands within a few per cent
/// of the swept one where a controller nudging the threshold by the overspend lags by a day (on
/// the dev trace, hour-of-day at 1×: 0.575 of opens fresh against 0.527 with the nudging
/// controller and 0.585 with the swept threshold).
public struct ThresholdFit: Sendable {
    struct Candidate: Sendable {
        var at: Double
        var app: Int32
        var score: Double
        var lastOpen: Double
    }

    public let window: Double
    public let rewake: Double
    private var candidates: [Candidate] = []
    /// Index of the oldest candidate still inside the window (older ones are dropped in batches).
    private var oldest = 0
    private var appNumbers: [String: Int32] = [:]

    public init(window: Duration = .seconds(7 * 86400), rewake: Duration = .seconds(3600)) {
        self.window = window.seconds
        self.rewake = rewake.seconds
    }

    /// How many candidates the window holds.
    public var count: Int { candidates.count - oldest }

    /// Remembers that the planner scored `app` at `t` (its last open at `lastOpen`), woken or not.
    public mutating func record(_ app: String, score: Double, at t: Double, lastOpen: Double) {
        let number = appNumbers[app] ?? Int32(appNumbers.count)
        appNumbers[app] = number
        candidates.append(Candidate(at: t, app: number, score: score, lastOpen: lastOpen))
    }

    /// The lowest threshold at which the window before `t` would have spent at most `budget`
    /// wakes, to within `precision` (a factor), searched from `start` (the last fit: it moves
    /// little from hour to hour, so a few replays of the window find it); nil when nothing was
    /// recorded. When not even the best candidate fits, the best one's score: the budget's
    /// balance then limits what goes.
    public mutating func threshold(
        spending budget: Double, at t: Double, from start: Double, precision: Double = 1.01
    ) -> Double? {
        forget(before: t - window)
        guard count > 0 else { return nil }
        let (rewake, apps, oldest) = (rewake, appNumbers.count, oldest)
        // Every planner refits hourly over a week of candidates, a dozen replays each: on raw
        // pointers, with nothing generic per candidate, so a debug build (the test suite replays
        // the dev trace in one) is not many times slower than a release build.
        return candidates.withUnsafeBufferPointer { all in
            let window = UnsafeBufferPointer(rebasing: all[oldest...])
            var best = -Double.infinity
            for candidate in window { best = max(best, candidate.score) }
            guard best > 0 else { return nil }
            let limit = Int(budget.rounded(.down))
            func fits(_ threshold: Double, _ pool: UnsafeBufferPointer<Candidate>) -> Bool {
                Self.wakes(of: pool, at: threshold, rewake: rewake, apps: apps, upTo: limit) <= limit
            }
            if !fits(best, window) { return best }
            // Bracket: `high` fits, `low` does not (or is as low as scores go).
            var high = min(max(start, best * 1e-6), best)
            var low = high
            if fits(high, window) {
                repeat {
                    low /= 2
                } while low > best * 1e-6 && fits(low, window)
                if fits(low, window) { return Self.lowestScore(atLeast: low, in: window) }
                high = min(best, low * 2)
            } else {
                repeat {
                    low = high
                    high = min(best, high * 2)
                } while !fits(high, window)
            }
            // Only candidates at or above the bracket's foot can change the count inside it.
            let pool = window.filter { $0.score >= low }
            return pool.withUnsafeBufferPointer { pool in
                while high / low > precision {
                    let middle = (high * low).squareRoot()
                    if fits(middle, pool) { high = middle } else { low = middle }
                }
                return Self.lowestScore(atLeast: high, in: pool)
            }
        }
    }

    /// The threshold as a score some candidate had (the same wakes as any value between it and
    /// the next score below, and a number `bgctl why` can show beside an estimate).
    private static func lowestScore(atLeast value: Double, in pool: UnsafeBufferPointer<Candidate>) -> Double {
        var lowest = Double.infinity
        for candidate in pool where candidate.score >= value { lowest = min(lowest, candidate.score) }
        return lowest == .infinity ? value : lowest
    }

    /// The wakes the window's candidates make at `threshold`.
    public func wakes(at threshold: Double) -> Int {
        candidates.withUnsafeBufferPointer { all in
            Self.wakes(
                of: UnsafeBufferPointer(rebasing: all[oldest...]), at: threshold, rewake: rewake,
                apps: appNumbers.count, upTo: .max)
        }
    }

    /// The wakes `candidates` (in time order) make at `threshold`, counted up to one past `limit`.
    private static func wakes(
        of candidates: UnsafeBufferPointer<Candidate>, at threshold: Double, rewake: Double, apps: Int,
        upTo limit: Int
    ) -> Int {
        withUnsafeTemporaryAllocation(of: Double.self, capacity: apps) { lastWake in
            lastWake.initialize(repeating: -.infinity)
            var count = 0
            for i in 0..<candidates.count {
                guard candidates[i].score >= threshold else { continue }
                let app = Int(candidates[i].app)
                let woke = lastWake[app]
                if candidates[i].at - woke >= rewake || woke < candidates[i].lastOpen {
                    lastWake[app] = candidates[i].at
                    count += 1
                    if count > limit { break }
                }
            }
            return count
        }
    }

    private mutating func forget(before cutoff: Double) {
        while oldest < candidates.count, candidates[oldest].at < cutoff { oldest += 1 }
        if oldest > 4096, oldest * 2 > candidates.count {
            candidates.removeFirst(oldest)
            oldest = 0
        }
    }
}
