import Foundation

/// The wakes bgd plans for an app over the hours ahead, if nothing new happens
/// (`GET /v1/apps/{id}/forecast?hours=24`).
public struct WakeForecast: Hashable, Codable, Sendable {
    public struct Wake: Hashable, Codable, Sendable {
        public var at: Date
        /// Session starts expected in the freshness window after the wake.
        public var expectedStarts: Double
        /// What binds it: the prediction and the threshold it reached.
        public var reason: DecisionReason

        public init(at: Date, expectedStarts: Double, reason: DecisionReason) {
            self.at = at
            self.expectedStarts = expectedStarts
            self.reason = reason
        }
    }

    public var app: AppID
    public var from: Date
    public var until: Date
    /// Today's threshold: expected session starts a wake must serve.
    public var threshold: Double
    /// The earliest a wake may come (interval, floor, backoff), and why.
    public var earliest: Date?
    public var earliestReasons: [DecisionReason]
    public var wakes: [Wake]
    /// Why there are no (more) wakes after the last one, when there is a reason to say.
    public var holdback: DecisionReason?

    public init(
        app: AppID, from: Date, until: Date, threshold: Double, earliest: Date?, earliestReasons: [DecisionReason],
        wakes: [Wake],
        holdback: DecisionReason?
    ) {
        self.app = app
        self.from = from
        self.until = until
        self.threshold = threshold
        self.earliest = earliest
        self.earliestReasons = earliestReasons
        self.wakes = wakes
        self.holdback = holdback
    }
}
