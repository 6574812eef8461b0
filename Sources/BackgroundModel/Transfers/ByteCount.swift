import Foundation

/// Sizes and rates as people read them: "293.0 KiB", "3.0 MiB" (binary units, one decimal).
public enum ByteCount {
    public static func describe(_ count: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        return unit == 0 ? "\(count) B" : String(format: "%.1f %@", value, units[unit])
    }
}
