import Foundation

/// How much more (or less) often sessions start in a given context than time of day alone
/// predicts — learnt by comparing, after the fact, what happened with what was expected.
///
/// For each context bucket it keeps observed session starts and the starts the time-of-day model
/// expected in the same moments; their ratio is the lift. An app's own ratio is trusted as its
/// evidence grows; until then it leans on the ratio of all the user's apps (shrinkage: `prior`
/// expected starts' worth of the shared ratio), and that one on 1 (no lift).
public struct ContextLift: Hashable, Sendable {
    struct Tally: Hashable, Sendable {
        var observed = 0.0
        var expected = 0.0
    }

    enum Bucket: Hashable, Sendable {
        case activity(UsageContext.Activity)
        case sinceOpen(UsageContext.SinceOpen)
    }

    /// Expected starts' worth of evidence the shared ratio counts for in an app's ratio.
    public var prior: Double
    private var shared: [Bucket: Tally] = [:]
    private var perApp: [String: [Bucket: Tally]] = [:]

    public init(prior: Double = 20) { self.prior = prior }

    /// One moment, settled: time of day expected `expected` starts of `app` in the window after
    /// it, and `observed` (0 or 1) came.
    mutating func learn(app: String, context: UsageContext, expected: Double, observed: Double) {
        for bucket in [Bucket.activity(context.activity), .sinceOpen(context.sinceOpen)] {
            shared[bucket, default: Tally()].observed += observed
            shared[bucket, default: Tally()].expected += expected
            perApp[app, default: [:]][bucket, default: Tally()].observed += observed
            perApp[app, default: [:]][bucket, default: Tally()].expected += expected
        }
    }

    /// The lift for the user being active (or not), and for the time since the app was opened.
    public func lifts(app: String, context: UsageContext) -> (activity: Double, sinceOpen: Double) {
        (lift(app: app, bucket: .activity(context.activity)), lift(app: app, bucket: .sinceOpen(context.sinceOpen)))
    }

    private func lift(app: String, bucket: Bucket) -> Double {
        let all = shared[bucket] ?? Tally()
        let sharedRatio = (all.observed + 1) / (all.expected + 1)
        let own = perApp[app]?[bucket] ?? Tally()
        return (own.observed + prior * sharedRatio) / (own.expected + prior)
    }

    /// Forgets what was learnt about one app.
    mutating func forget(app: String) { perApp[app] = nil }
}
