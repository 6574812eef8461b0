import Foundation

/// Everything bgd learns about one user's habits, for all their apps together: each app's
/// time-of-day model (`UsageModel`), and how the context — the user active right now, the time
/// since the app was last opened — shifts those expectations (`ContextLift`).
///
/// It learns by keeping score of itself. Every `sampleEvery` (and just after each open) it notes,
/// for each app that is not fresh anyway, how many session starts time of day expects in the
/// `window` ahead and in what context; when the window has passed it checks whether a session
/// did start, and the lift of that context moves toward observed ÷ expected. Only the past is
/// ever used, so a replay through it learns online exactly as the daemon does.
///
/// Pure and deterministic: the same opens, fed in the same order, give the same state. The daemon
/// rebuilds it from the stored opens when it starts.
public struct UsageLearner: Sendable {
    public struct Configuration: Hashable, Sendable {
        public var usage: UsageModel.Configuration
        /// How long fetched content stays fresh: a wake serves the sessions starting this long after it.
        public var window: Duration
        /// How often the learner checks its own expectations.
        public var sampleEvery: Duration
        /// See `ContextLift.prior`.
        public var liftPrior: Double
        /// After a longer silence (the machine was off, the clock jumped) only this much is sampled.
        public var maximumCatchUp: Duration

        public init(
            usage: UsageModel.Configuration = .init(), window: Duration = .seconds(3600),
            sampleEvery: Duration = .seconds(600),
            liftPrior: Double = 20, maximumCatchUp: Duration = .seconds(2 * 86400)
        ) {
            self.usage = usage
            self.window = window
            self.sampleEvery = max(.seconds(60), sampleEvery)
            self.liftPrior = liftPrior
            self.maximumCatchUp = maximumCatchUp
        }
    }

    /// What the learner expects of one app in the window after an instant, and why.
    public struct Prediction: Hashable, Sendable {
        /// Session starts time of day alone expects in the window.
        public var fromTimeOfDay: Double
        public var context: UsageContext
        public var activityLift: Double
        public var sinceOpenLift: Double
        /// The expected session starts in the window, all evidence together.
        public var expectedStarts: Double { fromTimeOfDay * activityLift * sinceOpenLift }
    }

    private struct Sample {
        var at: Date
        var app: String
        var expected: Double
        var context: UsageContext
    }

    public let configuration: Configuration
    public private(set) var models: [String: UsageModel] = [:]
    /// Every open of every app: the user's overall rhythm, and how much they use the device.
    public private(set) var device: UsageModel
    public private(set) var lift: ContextLift
    /// The user's latest open of any app.
    public private(set) var lastActivity: Date?
    private var pending: [Sample] = []
    private var pendingHead = 0
    /// Opens recent enough to settle pending samples, per app.
    private var recentOpens: [String: [Date]] = [:]
    private var sampledUntil: Date?
    private var activitySampleDue: Date?

    public init(configuration: Configuration = .init()) {
        self.configuration = configuration
        lift = ContextLift(prior: configuration.liftPrior)
        device = UsageModel(configuration: configuration.usage)
    }

    /// Learns from an open. Opens come in time order; one dated before the latest (a clock that
    /// went back) counts as happening at the latest.
    public mutating func recordOpen(of app: String, at rawDate: Date) {
        let date = max(rawDate, lastActivity ?? rawDate)
        advance(to: date)
        models[app, default: UsageModel(configuration: configuration.usage)].recordOpen(at: date)
        device.recordOpen(at: date)
        recentOpens[app, default: []].append(date)
        lastActivity = date
        sampledUntil = max(sampledUntil ?? date, date)
        // Just after the user acted is the moment the activity evidence matters most: sample it.
        activitySampleDue = date.addingTimeInterval(1)
    }

    /// Takes the samples due up to `now` and settles those whose window has passed.
    public mutating func advance(to now: Date) {
        guard let start = sampledUntil, now > start else { return }
        var cursor = max(start, now.addingTimeInterval(-configuration.maximumCatchUp.seconds))
        let step = configuration.sampleEvery.seconds
        while true {
            var next = Date(timeIntervalSince1970: ((cursor.timeIntervalSince1970 / step).rounded(.down) + 1) * step)
            if let due = activitySampleDue, due > cursor, due < next { next = due }
            guard next <= now else { break }
            settle(before: next)
            takeSamples(at: next)
            if next == activitySampleDue { activitySampleDue = nil }
            cursor = next
        }
        sampledUntil = now
        settle(before: now)
    }

    /// What the learner expects of `app` in the window after `date`, in the context `date` will
    /// have if nothing else happens before it. Nil for an app never opened.
    public func prediction(for app: String, after date: Date, within span: Duration? = nil, now: Date) -> Prediction? {
        guard let model = models[app], let lastOpen = model.lastOpen else { return nil }
        let context = UsageContext(
            activity: .init(sinceLastActivity: lastActivity.map { date.timeIntervalSince($0) }),
            sinceOpen: .init(sinceLastOpen: date.timeIntervalSince(lastOpen)))
        let lifts = lift.lifts(app: app, context: context)
        return Prediction(
            fromTimeOfDay: expectedFromTimeOfDay(model, after: date, within: span ?? configuration.window, now: now),
            context: context,
            activityLift: lifts.activity, sinceOpenLift: lifts.sinceOpen)
    }

    /// The share of the user's opens that go to `app`, lately.
    public func share(of app: String, now: Date) -> Double {
        let all = models.values.reduce(0) { $0 + $1.opensPerDay(now: now) }
        guard all > 0, let model = models[app] else { return 0 }
        return model.opensPerDay(now: now) / all
    }

    /// Forgets one app's habits (`bgctl usage APP --reset`).
    public mutating func forget(app: String) {
        models[app] = nil
        recentOpens[app] = nil
        lift.forget(app: app)
        pending.removeAll { $0.app == app }
        pendingHead = min(pendingHead, pending.count)
    }

    /// Session starts expected in the window after `date`, from the slots it spans.
    private func expectedFromTimeOfDay(
        _ model: UsageModel, after date: Date, within span: Duration, now: Date
    ) -> Double {
        let slot = model.configuration.slot.seconds
        let slots = max(1, Int((span.seconds / slot).rounded()))
        var total = 0.0
        for index in 0..<slots {
            total += model.sessionStartRate(
                inSlotContaining: date.addingTimeInterval(1 + Double(index) * slot), now: now)
        }
        return total
    }

    private mutating func takeSamples(at date: Date) {
        let window = configuration.window.seconds
        for (app, model) in models {
            guard let lastOpen = model.lastOpen, date.timeIntervalSince(lastOpen) >= window,
                let prediction = prediction(for: app, after: date, now: date)
            else { continue }
            pending.append(Sample(at: date, app: app, expected: prediction.fromTimeOfDay, context: prediction.context))
        }
    }

    private mutating func settle(before now: Date) {
        let window = configuration.window.seconds
        while pendingHead < pending.count, pending[pendingHead].at.addingTimeInterval(window) < now {
            let sample = pending[pendingHead]
            pendingHead += 1
            let end = sample.at.addingTimeInterval(window)
            let started = recentOpens[sample.app]?.contains { $0 > sample.at && $0 <= end } ?? false
            lift.learn(app: sample.app, context: sample.context, expected: sample.expected, observed: started ? 1 : 0)
        }
        if pendingHead > 4096 {
            pending.removeFirst(pendingHead)
            pendingHead = 0
        }
        // Opens older than every pending sample can settle nothing more.
        let oldest = pendingHead < pending.count ? pending[pendingHead].at : now
        for app in Array(recentOpens.keys) {
            if let first = recentOpens[app]?.first, first <= oldest {
                recentOpens[app]!.removeAll { $0 <= oldest }
            }
        }
    }
}
