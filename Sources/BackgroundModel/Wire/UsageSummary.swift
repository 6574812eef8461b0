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
        busiestSlots: [Slot]
    ) {
        self.app = app
        self.opensRecorded = opensRecorded
        self.firstOpen = firstOpen
        self.lastOpen = lastOpen
        self.opensPerDay = opensPerDay
        self.sessionsPerDay = sessionsPerDay
        self.busiestSlots = busiestSlots
    }
}
