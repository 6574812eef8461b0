import Foundation

/// One user's app opens so far, kept in the shapes the open predictor reads fast: each app's
/// open times, decayed counts by local time of day and of week, which apps follow which, and
/// which apps are the first thing after a long idle. Only the past: every read is "as of now",
/// and opens are recorded in time order.
///
/// Times are seconds since 1970 (`Double`): this runs a hundred thousand times per replayed day.
public struct OpenHistory: Sendable {
    public struct Configuration: Hashable, Sendable {
        /// The users' offset from UTC (their local time of day and week), where no time zone is given.
        public var utcOffset: Double
        /// The users' time zone (`init`'s `timeZone`), whose offset may change (daylight saving
        /// time): each open is read in the offset of its own moment. A daemon that ran through a
        /// change with the offset it started with put every open after it an hour off the habits
        /// learned before. Its offsets are looked up once: the model reads local time for every
        /// moment it scores, a hundred thousand times per replayed day.
        let zoneOffsets: ZoneOffsets?
        /// Half-life of the time-of-day and time-of-week counts.
        public var halfLife: Double
        /// An open this long after the user's previous open of anything ends a long idle.
        public var longIdle: Double
        /// Co-usage: an app opened within this after another "follows" it.
        public var followWindow: Double
        /// An open this long after the app's previous one starts a session: only session starts
        /// count in the rates (a trace that logs the foreground app every few minutes repeats
        /// one long use many times, and those repeats need no wake).
        public var sessionGap: Double

        public init(
            utcOffset: Duration = .zero, timeZone: TimeZone? = nil, halfLife: Duration = .seconds(14 * 86400),
            longIdle: Duration = .seconds(3 * 3600), followWindow: Duration = .seconds(3600),
            sessionGap: Duration = .seconds(3600)
        ) {
            zoneOffsets = timeZone.map(ZoneOffsets.init)
            self.sessionGap = sessionGap.seconds
            self.utcOffset = utcOffset.seconds
            self.halfLife = halfLife.seconds
            self.longIdle = longIdle.seconds
            self.followWindow = followWindow.seconds
        }
    }

    static let slotLength = 600.0
    static let slotsPerDay = 144
    static let slotsPerWeek = 1008

    public let configuration: Configuration
    /// Each app's opens, oldest first.
    public private(set) var opens: [String: [Double]] = [:]
    /// Each app's session starts, oldest first.
    public private(set) var starts: [String: [Double]] = [:]
    /// Every open of any app, oldest first.
    public private(set) var allOpens: [Double] = []
    /// The apps opened so far, in name order: planners look at them in the same order in every
    /// run, so figures are reproducible (a dictionary's order changes from process to process),
    /// and without sorting them at every moment.
    public private(set) var appsByName: [String] = []
    /// Decayed counts per 10-minute slot of the local day and week, stored inflated by
    /// exp(λ·(t − origin)) so an open is one addition; read back deflated.
    private var daySlots: [String: [Double]] = [:]
    private var weekSlots: [String: [Double]] = [:]
    private var origin: Double?
    /// How often each app was followed by each other app within `followWindow`, and how often
    /// it was opened (the denominator).
    private var followed: [String: [String: Double]] = [:]
    /// How many of each app's opens came after a long idle.
    private var afterIdle: [String: Double] = [:]
    /// The opens that ended a long idle (the user "woke up"), and for each app in how many of
    /// those mornings it was opened within `morningWindow`.
    private var wakeUps: [Double] = []
    private var morningHits: [String: Double] = [:]
    private var countedThisMorning: Set<String> = []
    /// What each count above was raised by, and when, oldest first: `forget(before:)` takes
    /// back what it drops.
    private var followLog: [(at: Double, other: String, app: String)] = []
    private var afterIdleLog: [(at: Double, app: String)] = []
    private var morningLog: [(at: Double, app: String)] = []
    static let morningWindow = 2.0 * 3600

    public init(configuration: Configuration = .init()) { self.configuration = configuration }

    var decayRate: Double { log(2) / configuration.halfLife }

    func localSeconds(_ t: Double) -> Double {
        t + (configuration.zoneOffsets?.offset(at: t) ?? configuration.utcOffset)
    }

    func daySlot(_ t: Double) -> Int {
        let s = Int((localSeconds(t) / Self.slotLength).rounded(.down)) % Self.slotsPerDay
        return s < 0 ? s + Self.slotsPerDay : s
    }

    func weekSlot(_ t: Double) -> Int {
        // 1970-01-01 was a Thursday: shift so slot 0 is Monday 00:00 local.
        let s = Int(((localSeconds(t) + 3 * 86400) / Self.slotLength).rounded(.down)) % Self.slotsPerWeek
        return s < 0 ? s + Self.slotsPerWeek : s
    }

    /// Records an open at `t` (not before the last one recorded).
    public mutating func recordOpen(of app: String, at t: Double) {
        if allOpens.last.map({ t - $0 >= configuration.longIdle }) ?? true {
            wakeUps.append(t)
            countedThisMorning = []
        }
        if let wokeUp = wakeUps.last, t - wokeUp <= Self.morningWindow, !countedThisMorning.contains(app) {
            countedThisMorning.insert(app)
            morningHits[app, default: 0] += 1
            morningLog.append((t, app))
        }
        if opens[app] == nil {
            appsByName.insert(app, at: appsByName.firstIndex { $0 > app } ?? appsByName.endIndex)
        }
        defer {
            opens[app, default: []].append(t)
            allOpens.append(t)
        }
        if let previous = opens[app]?.last, t - previous < configuration.sessionGap { return }  // the same session
        starts[app, default: []].append(t)
        let origin = self.origin ?? t
        self.origin = origin
        let weight = exp(decayRate * (t - origin))
        daySlots[app, default: Array(repeating: 0, count: Self.slotsPerDay)][daySlot(t)] += weight
        weekSlots[app, default: Array(repeating: 0, count: Self.slotsPerWeek)][weekSlot(t)] += weight
        // Who it follows: each other app opened within the window, once.
        var seen: Set<String> = []
        for (other, times) in opens where other != app && !seen.contains(other) {
            if let last = times.last, t - last <= configuration.followWindow {
                followed[other, default: [:]][app, default: 0] += 1
                followLog.append((t, other, app))
                seen.insert(other)
            }
        }
        if let previous = allOpens.last, t - previous >= configuration.longIdle {
            afterIdle[app, default: 0] += 1
            afterIdleLog.append((t, app))
        }
    }

    /// Drops every open before `cutoff` and all it counted — rates, co-usage, after-idle and
    /// morning shares — and the apps left with none: what remains is the history of the opens
    /// since `cutoff` alone (up to rounding in the decayed rates), the one a model rebuilt from
    /// them holds. bgd keeps its model to the window a restart reads (8 weeks), so a bgd that
    /// has run for months neither grows with every open it ever saw nor plans differently from
    /// one just started.
    public mutating func forget(before cutoff: Double) {
        guard let first = allOpens.first, first < cutoff else { return }
        allOpens.removeFirst(allOpens.count(before: cutoff))
        let keptWakeUps = wakeUps.count(before: cutoff)
        wakeUps.removeFirst(keptWakeUps)
        for (app, times) in starts {
            let dropped = times.count(before: cutoff)
            guard dropped > 0, let origin else { continue }
            for t in times.prefix(dropped) {
                let (weight, day, week) = (exp(decayRate * (t - origin)), daySlot(t), weekSlot(t))
                daySlots[app]?[day] -= weight
                weekSlots[app]?[week] -= weight
            }
            starts[app] = Array(times.dropFirst(dropped))
        }
        for (app, times) in opens {
            let dropped = times.count(before: cutoff)
            if dropped > 0 { opens[app] = Array(times.dropFirst(dropped)) }
        }
        let followDropped = followLog.prefix { $0.at < cutoff }.count
        for entry in followLog.prefix(followDropped) { followed[entry.other]?[entry.app]? -= 1 }
        followLog.removeFirst(followDropped)
        // A history's first open has nothing before it to be idle from (a rebuild from the kept
        // opens does not count it): neither does the first one kept.
        let idleDropped = afterIdleLog.prefix { $0.at < cutoff || $0.at == allOpens.first }.count
        for entry in afterIdleLog.prefix(idleDropped) { afterIdle[entry.app]? -= 1 }
        afterIdleLog.removeFirst(idleDropped)
        let morningDropped = morningLog.prefix { $0.at < cutoff }.count
        for entry in morningLog.prefix(morningDropped) { morningHits[entry.app]? -= 1 }
        morningLog.removeFirst(morningDropped)
        // Apps with no open left are gone, as they would be from a rebuilt model.
        let gone = Set(opens.filter { $0.value.isEmpty }.keys)
        if !gone.isEmpty {
            appsByName.removeAll { gone.contains($0) }
            for app in gone {
                (opens[app], starts[app], daySlots[app], weekSlots[app]) = (nil, nil, nil, nil)
                (followed[app], afterIdle[app], morningHits[app]) = (nil, nil, nil)
                countedThisMorning.remove(app)
            }
            for other in followed.keys { for app in gone { followed[other]?[app] = nil } }
        }
        // The decayed counts are kept inflated from `origin`: move it up to now and then (to the
        // oldest open kept), so they never grow toward a Double's limit over the years.
        if let origin, let kept = allOpens.first, kept - origin > 30 * configuration.halfLife {
            let deflate = exp(-decayRate * (kept - origin))
            for app in daySlots.keys { daySlots[app] = daySlots[app]!.map { $0 * deflate } }
            for app in weekSlots.keys { weekSlots[app] = weekSlots[app]!.map { $0 * deflate } }
            self.origin = kept
        }
    }

    /// The app's decayed opens per day in the local window [t, t + length) of the day.
    public func dayRate(of app: String, at t: Double, length: Double) -> Double {
        guard let slots = daySlots[app], let origin else { return 0 }
        let start = daySlot(t)
        var sum = 0.0
        for k in 0..<max(1, Int(length / Self.slotLength)) { sum += slots[(start + k) % Self.slotsPerDay] }
        return sum * exp(-decayRate * (t - origin)) * decayRate * 86400
    }

    /// The same by local time of week (per week).
    public func weekRate(of app: String, at t: Double, length: Double) -> Double {
        guard let slots = weekSlots[app], let origin else { return 0 }
        let start = weekSlot(t)
        var sum = 0.0
        for k in 0..<max(1, Int(length / Self.slotLength)) { sum += slots[(start + k) % Self.slotsPerWeek] }
        return sum * exp(-decayRate * (t - origin)) * decayRate * 86400 * 7
    }

    /// The app's decayed opens per day over all hours.
    public func overallRate(of app: String, at t: Double) -> Double {
        guard let slots = daySlots[app], let origin else { return 0 }
        var sum = 0.0
        for slot in 0..<Self.slotsPerDay { sum += slots[slot] }
        return sum * exp(-decayRate * (t - origin)) * decayRate * 86400
    }

    /// The share of the `days` days before `t`, stepping back `stride` days at a time (1: every
    /// day; 7: the same weekday), that had an open of the app in [t − d, t − d + length).
    public func shareOfDays(with app: String, at t: Double, length: Double, days: Int, stride: Int = 1) -> Double {
        guard let times = starts[app], let first = times.first else { return 0 }
        var hits = 0
        var counted = 0
        for back in 1...days {
            let start = t - Double(back * stride) * 86400
            if start < first - 86400 { break }  // before the app was known: not evidence either way
            counted += 1
            if let next = times.first(notBefore: start), next < start + length { hits += 1 }
        }
        return counted == 0 ? 0 : Double(hits) / Double(counted)
    }

    /// The highest share, among apps opened in the last `followWindow`, of their opens that this
    /// app followed.
    public func coUsage(of app: String, at t: Double) -> Double {
        var best = 0.0
        for (other, times) in opens where other != app {
            guard let last = times.last, t - last <= configuration.followWindow else { continue }
            // Once `forget` has dropped the start of a session whose later opens are kept, `other`
            // may have no start left: divided by none, the share was infinite and the model's
            // estimate not a number. (A share above 1 is the model's as it learnt it: an app
            // started more than once within one session of the other.)
            let share = (followed[other]?[app] ?? 0) / Double(max(1, starts[other]?.count ?? 0))
            best = max(best, share)
        }
        return best
    }

    /// The share of the app's opens that came after a long idle.
    public func afterIdleShare(of app: String) -> Double {
        guard let count = starts[app]?.count, count > 0 else { return 0 }
        return (afterIdle[app] ?? 0) / Double(count)
    }

    /// In the two hours after the user ended a long idle, for an app not opened yet since: the
    /// share of past such mornings in which it was. Zero otherwise.
    public func morningHabit(of app: String, at t: Double) -> Double {
        guard let wokeUp = wakeUps.last, t - wokeUp <= Self.morningWindow, !countedThisMorning.contains(app),
            wakeUps.count > 1
        else { return 0 }
        return (morningHits[app] ?? 0) / Double(wakeUps.count - 1)
    }

    /// Opens of anything in (t − window, t].
    /// Whether `app` was opened after `t` and no later than `t + horizon`: the outcome of a
    /// moment, for the model's examples and for the check of its estimates alike.
    public func isOpened(_ app: String, after t: Double, within horizon: Double) -> Bool {
        (opens[app] ?? []).first(notBefore: t + 1e-6).map { $0 <= t + horizon } ?? false
    }

    public func recentOpens(at t: Double, within window: Double) -> Int {
        allOpens.count(notBefore: t - window)
    }
}
