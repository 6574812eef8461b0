import BackgroundModel
import Foundation

/// Plans an app's next background wake from what the usage model expects: shortly before the
/// user is likely to start a session, within a daily budget that follows how much the app is used.
///
/// Over the day ahead it places up to `budget` wakes, greedily, each where it covers the most
/// expected session starts in the `freshness` window after it (starts that the last refresh still
/// covers count for nothing), and keeps only wakes worth at least `minimumValue` of a session.
/// The budget follows the app's own rate of opens a day, so an app opened five times a day gets
/// about five wakes and an app never opened gets none — the standby buckets of Android, derived
/// instead of fixed. Pure: the caller passes the model, the last refresh and `now`.
public struct AdaptiveWakePlanner: Hashable, Sendable {
    public struct Configuration: Hashable, Sendable {
        /// How long fetched content counts as fresh: a wake covers session starts this long after it.
        public var freshness: Duration
        /// Wakes a day per expected open a day: 1 spends what an oracle would, one wake per open.
        public var wakesPerOpen: Double
        /// A wake must be expected to serve at least this share of a session.
        public var minimumValue: Double
        /// How far ahead to plan.
        public var horizon: Duration
        /// When the user opens some app, wake another whose session follows at least this often.
        public var activityThreshold: Double

        public init(
            freshness: Duration = .seconds(60 * 60), wakesPerOpen: Double = 1, minimumValue: Double = 0.1,
            horizon: Duration = .seconds(86400), activityThreshold: Double = 0.1
        ) {
            self.activityThreshold = activityThreshold
            self.freshness = freshness
            self.wakesPerOpen = wakesPerOpen
            self.minimumValue = minimumValue
            self.horizon = horizon
        }
    }

    public var configuration: Configuration

    public init(configuration: Configuration = .init()) { self.configuration = configuration }

    /// One planned wake and what it is expected to serve.
    public struct PlannedWake: Hashable, Sendable {
        public var at: Date
        /// Expected session starts it covers.
        public var value: Double
    }

    /// Wakes the app may have a day: its recent opens a day × `wakesPerOpen`.
    public func dailyBudget(for model: UsageModel, now: Date) -> Int {
        Int((model.opensPerDay(now: now) * configuration.wakesPerOpen).rounded())
    }

    /// The plan for the horizon ahead, earliest first.
    ///
    /// - Parameters:
    ///   - lastRefresh: the last wake or open; content is fresh until `freshness` after it.
    ///   - wakesInLastDay: wakes already spent in the 24 hours before `now`.
    public func plan(for model: UsageModel, lastRefresh: Date?, wakesInLastDay: Int, now: Date) -> [PlannedWake] {
        var remaining = dailyBudget(for: model, now: now) - wakesInLastDay
        guard remaining > 0 else { return [] }
        let slot = model.configuration.slot.seconds
        let first = model.slotStart(containing: now).addingTimeInterval(slot)
        let count = Int(configuration.horizon.seconds / slot)
        let span = max(1, Int(configuration.freshness.seconds / slot))
        // Expected session starts per slot ahead; those the last refresh keeps fresh are worth nothing.
        let freshUntil = lastRefresh?.addingTimeInterval(configuration.freshness.seconds)
        var rates = (0..<count).map { index -> Double in
            let start = first.addingTimeInterval(Double(index) * slot)
            if let freshUntil, start.addingTimeInterval(slot) <= freshUntil { return 0 }
            return model.sessionStartRate(inSlotContaining: start, now: now)
        }
        var wakes: [PlannedWake] = []
        while remaining > 0 {
            // The wake at slot i serves slots i..<i+span; nearer slots get fresher content, so
            // they count a little more (ties go to the wake just before the likely open).
            var best: (index: Int, value: Double)?
            for index in 0..<count {
                var value = 0.0
                for offset in 0..<span where index + offset < count {
                    value += rates[index + offset] * (1 - 0.1 * Double(offset) / Double(span))
                }
                if value > (best?.value ?? 0) { best = (index, value) }
            }
            guard let best, best.value >= configuration.minimumValue else { break }
            for offset in 0..<span where best.index + offset < count { rates[best.index + offset] = 0 }
            // Wake a minute before the slot, so content is fetched when the slot's first open comes.
            wakes.append(PlannedWake(at: first.addingTimeInterval(Double(best.index) * slot - 60), value: best.value))
            remaining -= 1
        }
        return wakes.sorted { $0.at < $1.at }
    }
}
