import Foundation

/// The dates anything from outside may bring in: from 1970 to the last second of 9999 (UTC).
///
/// The store writes dates as text (`yyyy-MM-dd HH:mm:ss.SSS`): a year of five digits, or one
/// near `Int64.max` seconds (written as ''), cannot be read back, and reading a date column traps —
/// a push with `apns-expiration: 253402300800` put bgd in a crash loop, the row still there at
/// every start. Every date taken from a request, a header, a frame or a relay passes here first.
public enum StorableDates {
    public static let earliest = Date(timeIntervalSince1970: 0)
    /// 9999-12-31T23:59:59Z. A later fraction of that second is refused too: written to the
    /// millisecond it would round into year 10000.
    public static let latest = Date(timeIntervalSince1970: 253_402_300_799)

    public static func contains(_ date: Date) -> Bool { date >= earliest && date <= latest }

    /// `date` brought within the range (for values a peer sends that only limit something, such
    /// as a relayed push's expiration).
    public static func clamped(_ date: Date) -> Date { min(max(date, earliest), latest) }

    /// What the range is, for an error.
    public static let requirement = "a date from 1970 to 9999 (UTC)"
}
