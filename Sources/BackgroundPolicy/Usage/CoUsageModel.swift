import BackgroundModel
import Foundation

/// What one user's activity says about their other apps: when the user opens any app, how often
/// a session of app B starts within the hour after. Pure, learnt online, with forgetting.
///
/// The phone in the hand is the strongest hint that more apps are about to be opened; time of day
/// only says when that tends to happen.
public struct CoUsageModel: Sendable {
    public var window: Duration
    public var halfLife: Duration
    /// Decayed count of activity moments whose window has passed.
    public private(set) var moments: Double = 0
    /// Of those, decayed counts followed by a session start of each app within `window`.
    public private(set) var followedBy: [String: Double] = [:]
    private var pending: [(at: Date, started: Set<String>)] = []
    private var lastUpdate: Date?

    public init(window: Duration = .seconds(3600), halfLife: Duration = .seconds(14 * 86400)) {
        self.window = window
        self.halfLife = halfLife
    }

    /// Learns from an open of `app` at `date` (in time order); `isSessionStart` as the app's
    /// usage model judged it.
    public mutating func recordOpen(of app: String, at date: Date, isSessionStart: Bool) {
        settle(before: date)
        if isSessionStart {
            for index in pending.indices where pending[index].at < date { pending[index].started.insert(app) }
        }
        if pending.last?.at != date { pending.append((date, [])) }
    }

    /// The chance that a session of `app` starts within the window after an activity moment.
    /// Nil until enough moments have been seen to say.
    public func chanceOfSession(of app: String, minimumMoments: Double = 20) -> Double? {
        guard moments >= minimumMoments else { return nil }
        return (followedBy[app] ?? 0) / moments
    }

    /// Moments whose window has passed are counted, with the decay since the last count.
    private mutating func settle(before date: Date) {
        let horizon = date.addingTimeInterval(-window.seconds)
        while let first = pending.first, first.at < horizon {
            pending.removeFirst()
            if let lastUpdate {
                let factor = exp2(-max(0, first.at.timeIntervalSince(lastUpdate)) / halfLife.seconds)
                moments *= factor
                for key in followedBy.keys { followedBy[key]! *= factor }
            }
            lastUpdate = first.at
            moments += 1
            for app in first.started { followedBy[app, default: 0] += 1 }
        }
    }
}
