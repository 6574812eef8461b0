import BackgroundModel
import Foundation

/// What bgd has learned about when the user opens one app. Pure and inspectable.
///
/// It counts *session starts* — opens that come more than `sessionGap` after the previous one —
/// because only those can be stale: an open soon after another finds the content the first one
/// fetched. Counts are kept per slot of the day (time of day) and per slot of the week (day of
/// week and time), each open weighing less as it ages (exponential forgetting with `halfLife`),
/// so old habits fade. Rates are counts divided by the equally-decayed number of days observed,
/// which is known in closed form, so the model needs no clock and no periodic upkeep.
public struct UsageModel: Hashable, Sendable {
    public struct Configuration: Hashable, Sendable {
        /// The width of a slot: finer than the freshness window, so a wake can be placed just before a habit.
        public var slot: Duration
        /// An open's weight halves every `halfLife`.
        public var halfLife: Duration
        /// Opens closer than this to the previous one continue a session.
        public var sessionGap: Duration
        /// The user's offset from UTC, so "12:00" means the user's noon.
        public var utcOffset: Duration
        /// How many neighbouring slots each side share in a slot's count.
        public var smoothing: Int

        public init(
            slot: Duration = .seconds(10 * 60), halfLife: Duration = .seconds(14 * 86400),
            sessionGap: Duration = .seconds(60 * 60), utcOffset: Duration = .zero, smoothing: Int = 1
        ) {
            self.smoothing = max(0, smoothing)
            self.slot = slot
            self.halfLife = halfLife
            self.sessionGap = sessionGap
            self.utcOffset = utcOffset
        }

        public var slotsPerDay: Int { max(1, Int((86400 / slot.seconds).rounded())) }
    }

    public let configuration: Configuration
    /// Decayed session starts per slot of the day, as of `lastOpen`.
    public private(set) var daySlots: [Double]
    /// Decayed session starts per slot of the week (Monday first), as of `lastOpen`.
    public private(set) var weekSlots: [Double]
    public private(set) var firstOpen: Date?
    public private(set) var lastOpen: Date?
    /// Every open, sessions or not, decayed as of `lastOpen`.
    public private(set) var opens: Double = 0

    public init(configuration: Configuration = .init()) {
        self.configuration = configuration
        daySlots = Array(repeating: 0, count: configuration.slotsPerDay)
        weekSlots = Array(repeating: 0, count: configuration.slotsPerDay * 7)
    }

    /// Learns from one open. Opens must come in time order; an earlier one than the last (a
    /// clock that went back) is counted at the time of the last.
    public mutating func recordOpen(at rawDate: Date) {
        let date = max(rawDate, lastOpen ?? rawDate)
        let isSessionStart = lastOpen.map { date.timeIntervalSince($0) > configuration.sessionGap.seconds } ?? true
        if let lastOpen {
            let factor = decay(over: date.timeIntervalSince(lastOpen))
            if factor < 1 {
                for index in daySlots.indices { daySlots[index] *= factor }
                for index in weekSlots.indices { weekSlots[index] *= factor }
                opens *= factor
            }
        }
        opens += 1
        if isSessionStart {
            daySlots[daySlot(of: date)] += 1
            weekSlots[weekSlot(of: date)] += 1
        }
        firstOpen = firstOpen ?? date
        lastOpen = date
    }

    /// The expected number of session starts in the slot that contains `date`, learnt up to `now`.
    ///
    /// Habits are not punctual: counts are smoothed over the neighbouring slots (a triangular
    /// kernel `smoothing` slots wide each side), so an app opened at 9:10 one day and 9:40 the
    /// next is expected around 9:30 on the third.
    public func sessionStartRate(inSlotContaining date: Date, now: Date) -> Double {
        guard let perDay = perDayScale(now: now), let days = observedDays(now: now) else { return 0 }
        let byDay = smoothed(daySlots, at: daySlot(of: date)) * perDay
        let weeks = days / 7
        guard weeks >= 1 else { return byDay }
        let byWeek = smoothed(weekSlots, at: weekSlot(of: date)) * perDay * 7
        // The day-of-week habit earns trust as weeks of it are seen; time of day is the prior.
        let trust = min(1, (weeks - 1) / 2) * 0.5
        return (1 - trust) * byDay + trust * byWeek
    }

    private func smoothed(_ counts: [Double], at index: Int) -> Double {
        let width = configuration.smoothing
        guard width > 0 else { return counts[index] }
        var total = 0.0
        var weights = 0.0
        for offset in -width...width {
            let weight = Double(width + 1 - abs(offset))
            total += weight * counts[(index + offset + counts.count) % counts.count]
            weights += weight
        }
        return total / weights
    }

    /// The expected number of session starts a day, lately.
    public func sessionsPerDay(now: Date) -> Double {
        daySlots.reduce(0, +) * (perDayScale(now: now) ?? 0)
    }

    /// The expected number of opens a day, lately.
    public func opensPerDay(now: Date) -> Double {
        opens * (perDayScale(now: now) ?? 0)
    }

    /// Days of observation, each weighted as an open on it would be: ∫ 2^(−age/halfLife) over the
    /// time since the first open, at least one day (a single day of history is not a habit).
    public func observedDays(now: Date) -> Double? {
        guard let firstOpen else { return nil }
        let span = max(86400, now.timeIntervalSince(firstOpen))
        let halfLife = configuration.halfLife.seconds
        return halfLife / log(2) * (1 - exp2(-span / halfLife)) / 86400
    }

    /// A model that has learnt from `opens` (any order).
    public static func learning(from opens: [Date], configuration: Configuration = .init()) -> UsageModel {
        var model = UsageModel(configuration: configuration)
        for open in opens.sorted() { model.recordOpen(at: open) }
        return model
    }

    /// The busiest slots of the day, as "HH:MM" (in the model's local time) and session starts a
    /// day, busiest first.
    public func busiestSlots(limit: Int, now: Date) -> [(start: String, sessionsPerDay: Double)] {
        guard let perDay = perDayScale(now: now) else { return [] }
        let minutes = Int(configuration.slot.seconds / 60)
        return daySlots.indices.filter { daySlots[$0] > 0 }
            .sorted { daySlots[$0] > daySlots[$1] }.prefix(limit)
            .map { index in
                let minute = index * minutes
                return (String(format: "%02d:%02d", minute / 60, minute % 60), daySlots[index] * perDay)
            }
    }

    func daySlot(of date: Date) -> Int {
        let local = date.timeIntervalSince1970 + configuration.utcOffset.seconds
        let secondOfDay = local - (local / 86400).rounded(.down) * 86400
        return min(daySlots.count - 1, Int(secondOfDay / configuration.slot.seconds))
    }

    func weekSlot(of date: Date) -> Int {
        let local = date.timeIntervalSince1970 + configuration.utcOffset.seconds
        // 1970-01-01 was a Thursday: shift so that index 0 is Monday.
        let day = (Int((local / 86400).rounded(.down)) + 3) % 7
        return (day + 7) % 7 * daySlots.count + daySlot(of: date)
    }

    /// Turns a count kept as of `lastOpen` into a rate a day at `now`: the decay since, over the
    /// days observed. Nil before the first open.
    private func perDayScale(now: Date) -> Double? {
        guard let lastOpen, let days = observedDays(now: now), days > 0 else { return nil }
        return decay(over: max(0, now.timeIntervalSince(lastOpen))) / days
    }

    private func decay(over seconds: TimeInterval) -> Double { exp2(-seconds / configuration.halfLife.seconds) }
}
