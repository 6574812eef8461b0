import BackgroundModel
import Foundation

/// How often an app's fetches at one hour of the day bring new data, learnt from its answers.
///
/// iOS wakes an app less when its fetches keep finding nothing; so do we, per hour of day: a
/// news app whose feed is quiet at night answers `.noData` at 03:00 and is then woken less at
/// 03:00, not less at noon. Answers fade with a half-life, so an hour that was quiet gets tried
/// again once the evidence has aged, and the estimate is pulled towards the app's overall rate so
/// that a single `.noData` decides nothing.
public struct FetchYield: Hashable, Sendable {
    /// How far back apps' `.newData`/`.noData` answers are read (four of the default half-lives):
    /// the runs that hold them are kept at least this long, whatever `--keep-history` says.
    public static let answerMemory: Duration = .seconds(28 * 86400)

    public struct Configuration: Hashable, Sendable {
        /// An answer counts half as much after this long.
        public var halfLife: Duration
        /// An hour whose estimated share of `.newData` is below this is woken less.
        public var lowShare: Double
        /// …but only once this much (faded) evidence has been seen at that hour.
        public var minimumEvidence: Double
        /// The users' offset from UTC, so that hours are local hours.
        public var utcOffset: Duration

        public init(
            halfLife: Duration = .seconds(7 * 86400), lowShare: Double = 0.2, minimumEvidence: Double = 3,
            utcOffset: Duration = .zero
        ) {
            self.halfLife = halfLife
            self.lowShare = lowShare
            self.minimumEvidence = minimumEvidence
            self.utcOffset = utcOffset
        }
    }

    /// What the answers say about one hour.
    public struct Estimate: Hashable, Sendable {
        /// The local hour of day, 0…23.
        public var hour: Int
        /// Faded count of answers at that hour, and of those with new data.
        public var answers: Double
        public var newData: Double
        /// Estimated share of fetches at that hour that bring new data.
        public var share: Double
    }

    public var configuration: Configuration

    public init(configuration: Configuration = .init()) { self.configuration = configuration }

    /// The estimate for the hour `date` falls in, from the app's answers before `now`.
    public func estimate(at date: Date, answers: [FetchCandidate.Answer], now: Date) -> Estimate {
        let hour = hourOfDay(date)
        var total = 0.0, totalNew = 0.0, atHour = 0.0, newAtHour = 0.0
        for answer in answers where answer.at <= now {
            let weight = pow(0.5, now.timeIntervalSince(answer.at) / configuration.halfLife.seconds)
            total += weight
            if answer.broughtNewData { totalNew += weight }
            if hourOfDay(answer.at) == hour {
                atHour += weight
                if answer.broughtNewData { newAtHour += weight }
            }
        }
        // Beta prior: the app's overall rate (itself shrunk to ½), worth two answers.
        let overall = (totalNew + 1) / (total + 2)
        return Estimate(
            hour: hour, answers: atHour, newData: newAtHour, share: (newAtHour + 2 * overall) / (atHour + 2))
    }

    /// Whether a wake at that hour is mostly wasted.
    public func isLow(_ estimate: Estimate) -> Bool {
        estimate.answers >= configuration.minimumEvidence && estimate.share < configuration.lowShare
    }

    private func hourOfDay(_ date: Date) -> Int {
        let local = date.timeIntervalSince1970 + configuration.utcOffset.seconds
        let secondsIntoDay = local - (local / 86400).rounded(.down) * 86400
        return min(23, Int(secondsIntoDay / 3600))
    }
}

extension FetchPolicy {
    /// Wakes at an hour whose fetches mostly bring nothing come less often: an interval wake is
    /// put off by its spacing once more, and a wake for a predicted open is held, to be reviewed
    /// at the next hour (the open still fetches on its own).
    func applyingYield(to decision: WakeDecision, answers: [FetchCandidate.Answer], now: Date) -> WakeDecision {
        guard let due = decision.dueAt, !answers.isEmpty else { return decision }
        let yield = FetchYield(configuration: configuration.fetchYield)
        let estimate = yield.estimate(at: max(due, now), answers: answers, now: now)
        guard yield.isLow(estimate) else { return decision }
        var decision = decision
        let evidence =
            "fetches between \(String(format: "%02d:00", estimate.hour)) and \(String(format: "%02d:00", (estimate.hour + 1) % 24)) brought new data \(String(format: "%.1f", estimate.newData)) times in \(String(format: "%.1f", estimate.answers)) (recent answers count most); estimated share \(String(format: "%.2f", estimate.share))"
        if let spacing = decision.spacing, !decision.reasons.contains(where: { $0.code == .predictedOpen }) {
            decision.dueAt = due.adding(spacing)
            decision.reasons.append(
                DecisionReason(.usuallyNoData, "\(evidence); woken \(spacing.humanDescription) later"))
        } else {
            decision.dueAt = nil
            decision.reasons.append(DecisionReason(.usuallyNoData, "\(evidence); no wake this hour"))
        }
        return decision
    }
}
