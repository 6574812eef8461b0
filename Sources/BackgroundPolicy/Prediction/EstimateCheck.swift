import Foundation

/// The model checking its own estimates: for each quarter of the local day, how many of the
/// opens it expected over the last week came true, against the whole day's. An estimate is scaled
/// by its quarter's share, so the wakes go where the estimates have been coming true.
///
/// Why: the model is fitted to the past month, and where it errs on the days after a fit is not
/// in what it was fitted to. On the dev trace, of the candidates just above the 2× threshold,
/// 10.5 % were opened within the hour against 13.6 % estimated — but 4.7 % against 13.0 % at
/// night. A second fit over the same past examples found nothing to correct (it lost 0.004–0.010
/// at 1–3×). The estimates made before their outcome was known do show it. Scaling by quarter
/// moved the dev frontier by +0.009 / +0.004 / −0.001 / +0.011 / −0.006 / 0.000 at 0.5 / 1 / 1.5 /
/// 2 / 3 / 4× (docs/scheduling.md).
///
/// Only estimates at or above `floor` are checked and scaled: those are where any budget's
/// threshold lies, and the day's many near-zero estimates would swamp the ratio. A quarter with
/// little evidence keeps the day's ratio (`prior` expected opens' worth of it). The check reads
/// only the last `window`, the same week the budget's threshold reads, so a model rebuilt from
/// stored opens checks itself as one running all along would.
public struct EstimateCheck: Sendable {
    public struct Configuration: Hashable, Sendable {
        public var floor: Double
        public var window: Double
        public var prior: Double

        public init(floor: Double = 0.04, window: Duration = .seconds(7 * 86400), prior: Double = 5) {
            self.floor = floor
            self.window = window.seconds
            self.prior = prior
        }
    }

    /// The quarters of the local day: night (0–6 h), morning, afternoon, evening.
    public static let quarters = 4

    public let configuration: Configuration
    /// Estimates whose hour has not passed yet, in time order.
    private var pending: [(t: Double, app: String, quarter: Int, estimate: Double)] = []
    /// Estimates whose outcome is known, in time order, back to `window`.
    private var checked: [(t: Double, quarter: Int, estimate: Double, opened: Bool)] = []
    private var expected = Array(repeating: 0.0, count: quarters)
    private var opened = Array(repeating: 0.0, count: quarters)

    public init(configuration: Configuration = .init()) { self.configuration = configuration }

    /// Which quarter of the local day `t` is in (from the history's 10-minute slot of the day).
    public static func quarter(of t: Double, in history: OpenHistory) -> Int {
        history.daySlot(t) * quarters / OpenHistory.slotsPerDay
    }

    /// Remembers that the model gave `app` the chance `estimate` at `t`, to check once `horizon`
    /// has passed.
    public mutating func record(_ app: String, at t: Double, quarter: Int, estimate: Double) {
        guard estimate >= configuration.floor else { return }
        pending.append((t, app, quarter, estimate))
    }

    /// Checks every estimate whose `horizon` ended by `now` against the opens in `history`, and
    /// forgets those older than the window.
    public mutating func check(upTo now: Double, horizon: Double, history: OpenHistory) {
        let due = pending.prefix { $0.t + horizon <= now }
        for item in due {
            let hit = history.isOpened(item.app, after: item.t, within: horizon)
            checked.append((item.t, item.quarter, item.estimate, hit))
            expected[item.quarter] += item.estimate
            opened[item.quarter] += hit ? 1 : 0
        }
        pending.removeFirst(due.count)
        let old = checked.prefix { $0.t < now - horizon - configuration.window }
        for item in old {
            expected[item.quarter] -= item.estimate
            opened[item.quarter] -= item.opened ? 1 : 0
        }
        checked.removeFirst(old.count)
    }

    /// How much more (above 1) or less often than the day's the estimates of `quarter` came true.
    public func factor(_ quarter: Int) -> Double {
        let allExpected = expected.reduce(0, +)
        let allOpened = opened.reduce(0, +)
        let day = (allOpened + configuration.prior) / (allExpected + configuration.prior)
        let ratio = (opened[quarter] + configuration.prior * day) / (max(0, expected[quarter]) + configuration.prior)
        return ratio / day
    }

    /// `estimate` scaled by its quarter's factor (unchanged below the floor).
    public func scaled(_ estimate: Double, quarter: Int) -> (probability: Double, factor: Double) {
        guard estimate >= configuration.floor else { return (estimate, 1) }
        let factor = factor(quarter)
        return (min(1, estimate * factor), factor)
    }
}
