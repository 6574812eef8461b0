import Foundation

/// How fresh content was when users opened their apps, under a wake schedule — scored by the
/// rules of the project's trace README (and its reference `score.py`):
///
/// - a refresh is a wake of the app or an earlier open of it; age at an open = open − last refresh;
/// - each user's first `warmUp` (from their first open of anything) is not scored, nor is the
///   first open of each (user, app); wakes and opens during warm-up still refresh;
/// - wakes after the user's last open do not count;
/// - the median is the age at rank ⌊n/2⌋, p90 at ⌊0.9 n⌋; wakes per user-day counts wakes after
///   warm-up over the days after warm-up, all users together.
public struct FreshnessScore: Hashable, Sendable {
    public var opensScored: Int
    public var medianAge: Duration
    public var p90Age: Duration
    public var freshWithin15Minutes: Double
    public var freshWithin60Minutes: Double
    public var wakesPerUserDay: Double

    public static let warmUp: Duration = .seconds(7 * 86400)

    public init(trace: AppOpenTrace, wakes: [AppOpenTrace.Key: [Date]], warmUp: Duration = Self.warmUp) {
        var ages: [Double] = []
        var wakeCount = 0
        var scoredDays = 0.0
        var spans: [String: ClosedRange<Date>] = [:]
        for user in trace.users {
            guard let span = trace.span(of: user) else { continue }
            spans[user] = span
            scoredDays += max(0, span.upperBound.timeIntervalSince(span.lowerBound.adding(warmUp))) / 86400
        }
        for (key, opens) in trace.opens {
            guard let span = spans[key.user] else { continue }
            let scoredFrom = span.lowerBound.adding(warmUp)
            let appWakes = (wakes[key] ?? []).filter { $0 <= span.upperBound }.sorted()
            wakeCount += appWakes.count { $0 >= scoredFrom }
            for (index, open) in opens.enumerated() where index > 0 && open >= scoredFrom {
                var lastRefresh = opens[index - 1]
                if let wake = appWakes.last(notAfter: open), wake > lastRefresh { lastRefresh = wake }
                ages.append(open.timeIntervalSince(lastRefresh) / 60)
            }
        }
        ages.sort()
        let n = ages.count
        func quantile(_ q: Double) -> Duration {
            n == 0 ? .zero : .milliseconds(Int64((ages[min(n - 1, Int(q * Double(n)))] * 60_000).rounded()))
        }
        opensScored = n
        medianAge = quantile(0.5)
        p90Age = quantile(0.9)
        freshWithin15Minutes = n == 0 ? 0 : Double(ages.count { $0 <= 15 }) / Double(n)
        freshWithin60Minutes = n == 0 ? 0 : Double(ages.count { $0 <= 60 }) / Double(n)
        wakesPerUserDay = scoredDays == 0 ? 0 : Double(wakeCount) / scoredDays
    }

    /// Scored as the check on unseen traces scores: the wakes as written and shifted one second
    /// earlier, the worse of the two (a schedule that only works on the trace's logging grid
    /// loses here).
    public static func strict(trace: AppOpenTrace, wakes: [AppOpenTrace.Key: [Date]]) -> FreshnessScore {
        let asWritten = FreshnessScore(trace: trace, wakes: wakes)
        let earlier = FreshnessScore(trace: trace, wakes: wakes.mapValues { $0.map { $0.addingTimeInterval(-1) } })
        return earlier.freshWithin60Minutes < asWritten.freshWithin60Minutes ? earlier : asWritten
    }
}
