import Foundation

/// What bgd has learnt about when the user opens an app (`GET /v1/apps/{id}/usage`).
public struct UsageSummary: Hashable, Codable, Sendable {
    public var app: AppID
    /// Opens on record (the model keeps the latest 1,000).
    public var opensRecorded: Int
    public var firstOpen: Date?
    public var lastOpen: Date?
    /// Recent rates, with old habits weighing less.
    public var opensPerDay: Double
    public var sessionsPerDay: Double
    /// The times of day when sessions start most, busiest first: slot start as "HH:MM" (UTC) and
    /// expected session starts in that slot a day.
    public var busiestSlots: [Slot]
    /// The learned model's chance that the app is opened within `openChanceWithin` from now, the
    /// user's wake threshold, and the features that moved the chance most (nil: never opened,
    /// or the learned planner is off).
    public var openChance: OpenChance?

    public struct OpenChance: Hashable, Codable, Sendable {
        public var probability: Double
        /// In seconds on the wire.
        public var within: Duration
        public var threshold: Double
        /// Feature name and its pull on the log-odds, strongest first.
        public var factors: [Factor]
        /// What the model's chance was scaled by for this time of day: how its estimates then
        /// came true over the last week against the whole day's (nil from a bgd before it).
        public var timeOfDayFactor: Double?

        public struct Factor: Hashable, Codable, Sendable {
            public var feature: String
            public var pull: Double
            public init(feature: String, pull: Double) {
                self.feature = feature
                self.pull = pull
            }
        }

        public init(
            probability: Double, within: Duration, threshold: Double, factors: [Factor], timeOfDayFactor: Double? = nil
        ) {
            self.probability = probability
            self.within = within
            self.threshold = threshold
            self.factors = factors
            self.timeOfDayFactor = timeOfDayFactor
        }

        private enum CodingKeys: String, CodingKey {
            case probability, within, threshold, factors, timeOfDayFactor
        }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            probability = try c.decode(Double.self, forKey: .probability)
            within = try c.decode(WireSeconds.self, forKey: .within).duration
            threshold = try c.decode(Double.self, forKey: .threshold)
            factors = try c.decode([Factor].self, forKey: .factors)
            timeOfDayFactor = try c.decodeIfPresent(Double.self, forKey: .timeOfDayFactor)
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(probability, forKey: .probability)
            try c.encode(WireSeconds(within), forKey: .within)
            try c.encode(threshold, forKey: .threshold)
            try c.encode(factors, forKey: .factors)
            try c.encodeIfPresent(timeOfDayFactor, forKey: .timeOfDayFactor)
        }
    }

    public struct Slot: Hashable, Codable, Sendable {
        public var start: String
        public var sessionsPerDay: Double
        public init(start: String, sessionsPerDay: Double) {
            self.start = start
            self.sessionsPerDay = sessionsPerDay
        }
    }

    public init(
        app: AppID, opensRecorded: Int, firstOpen: Date?, lastOpen: Date?, opensPerDay: Double, sessionsPerDay: Double,
        busiestSlots: [Slot], openChance: OpenChance? = nil
    ) {
        self.openChance = openChance
        self.app = app
        self.opensRecorded = opensRecorded
        self.firstOpen = firstOpen
        self.lastOpen = lastOpen
        self.opensPerDay = opensPerDay
        self.sessionsPerDay = sessionsPerDay
        self.busiestSlots = busiestSlots
    }
}
