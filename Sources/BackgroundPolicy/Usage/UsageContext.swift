import Foundation

/// The situation an app is in at one instant, as far as the chance of a new session goes: how
/// long since the user touched *any* app (the phone in the hand), and how long since this app was
/// last opened (habits have rhythms: mail is checked again an hour or two later).
///
/// Both are bucketed, so that each bucket collects enough evidence to learn from.
public struct UsageContext: Hashable, Sendable, CustomStringConvertible {
    public enum Activity: Int, CaseIterable, Hashable, Sendable {
        case justNow, within20Minutes, within40Minutes, withinHour, within2Hours, idle

        init(sinceLastActivity seconds: TimeInterval?) {
            guard let seconds else {
                self = .idle
                return
            }
            switch seconds / 60 {
            case ...1: self = .justNow
            case ...20: self = .within20Minutes
            case ...40: self = .within40Minutes
            case ...60: self = .withinHour
            case ...120: self = .within2Hours
            default: self = .idle
            }
        }

        public var label: String {
            switch self {
            case .justNow: "the user is using another app now"
            case .within20Minutes: "the user used an app in the last 20 min"
            case .within40Minutes: "the user used an app 20–40 min ago"
            case .withinHour: "the user used an app 40–60 min ago"
            case .within2Hours: "the user used an app 1–2 h ago"
            case .idle: "the user has been away for over 2 h"
            }
        }
    }

    public enum SinceOpen: Int, CaseIterable, Hashable, Sendable {
        case within2Hours, within3Hours, within6Hours, within12Hours, withinDay, within2Days, longer

        init(sinceLastOpen seconds: TimeInterval) {
            switch seconds / 3600 {
            case ...2: self = .within2Hours
            case ...3: self = .within3Hours
            case ...6: self = .within6Hours
            case ...12: self = .within12Hours
            case ...24: self = .withinDay
            case ...48: self = .within2Days
            default: self = .longer
            }
        }

        public var label: String {
            switch self {
            case .within2Hours: "opened 1–2 h ago"
            case .within3Hours: "opened 2–3 h ago"
            case .within6Hours: "opened 3–6 h ago"
            case .within12Hours: "opened 6–12 h ago"
            case .withinDay: "opened 12–24 h ago"
            case .within2Days: "opened 1–2 days ago"
            case .longer: "not opened for over 2 days"
            }
        }
    }

    public var activity: Activity
    public var sinceOpen: SinceOpen

    public init(activity: Activity, sinceOpen: SinceOpen) {
        self.activity = activity
        self.sinceOpen = sinceOpen
    }

    public var description: String { "\(activity.label); \(sinceOpen.label)" }
}
