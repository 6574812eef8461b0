import Foundation

/// A time zone's offsets from UTC from 2000 to 2100, as a table: each offset and the moment it
/// starts. Read by binary search — a `TimeZone` asked for every moment the model scores made a
/// rebuild from weeks of opens a million zone lookups.
struct ZoneOffsets: Hashable, Sendable {
    /// Seconds since 1970 at which `offsets[i + 1]` starts; `offsets[0]` holds before the first.
    private let changes: [Double]
    private let offsets: [Double]

    init(_ zone: TimeZone) {
        var moment = Date(timeIntervalSince1970: 946_684_800)  // 2000-01-01
        let end = Date(timeIntervalSince1970: 4_102_444_800)  // 2100-01-01
        var changes: [Double] = []
        var offsets = [Double(zone.secondsFromGMT(for: moment))]
        while let next = zone.nextDaylightSavingTimeTransition(after: moment), next < end, next > moment {
            changes.append(next.timeIntervalSince1970)
            offsets.append(Double(zone.secondsFromGMT(for: next)))
            moment = next
        }
        self.changes = changes
        self.offsets = offsets
    }

    /// The offset in force at `t`.
    func offset(at t: Double) -> Double {
        var (low, high) = (0, changes.count)  // the number of changes at or before t
        while low < high {
            let middle = (low + high) / 2
            if changes[middle] <= t { low = middle + 1 } else { high = middle }
        }
        return offsets[low]
    }
}
