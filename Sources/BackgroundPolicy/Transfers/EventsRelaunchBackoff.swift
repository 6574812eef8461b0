import BackgroundModel
import Foundation

/// When an app that is not running may be launched again for its transfer events, after runs
/// launched for them ended without handling them (it crashed, could not start, ran out of
/// time). Every transfer that ends launches such an app, so an app that crashes on its events
/// was launched once per ending: 5,700 transfers cancelled launched it 5,673 times. The first
/// `freeRetries` such runs in a row are retried at once — one crash is usually an accident, and
/// the events should not wait for it — then a launch waits `base`, doubling with each failure,
/// up to `maximum`. A run that handled its events, or any other way of reaching the app (it
/// connects, or is launched for a fetch), delivers them whatever this says.
public struct EventsRelaunchBackoff: Hashable, Sendable {
    public var freeRetries: Int
    public var base: Duration
    public var maximum: Duration

    public init(freeRetries: Int = 2, base: Duration = .seconds(60), maximum: Duration = .seconds(3600)) {
        self.freeRetries = max(0, freeRetries)
        self.base = base
        self.maximum = max(base, maximum)
    }

    /// The outcomes that mean the app was launched for its events and did not handle them.
    static let failures: Set<RunOutcome> = [.crashed, .launchFailed, .expired]

    /// The earliest another launch for events may start, given the app's runs newest first (any
    /// kind: only those for transfer events are read); nil: now. Runs bgd cut short itself
    /// (`interrupted`, `cancelled`) neither count nor reset the count. The wait counts from the
    /// last failure, or from `now` when that is later by the wall clock (set back since): never
    /// longer than the wait itself from now.
    public func notBefore(now: Date, runs newestFirst: some Sequence<RunRecord>) -> Date? {
        var failed = 0
        var lastEnd: Date?
        for run in newestFirst where run.trigger == .transferEvents {
            guard let outcome = run.outcome, let endedAt = run.endedAt else { continue }
            if outcome == .interrupted || outcome == .cancelled { continue }
            guard Self.failures.contains(outcome) else { break }
            failed += 1
            lastEnd = lastEnd ?? endedAt
        }
        guard failed > freeRetries, let lastEnd else { return nil }
        let doublings = min(failed - freeRetries - 1, 30)
        return min(lastEnd, now).addingTimeInterval(min(base.seconds * pow(2, Double(doublings)), maximum.seconds))
    }
}
