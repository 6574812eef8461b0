import Foundation

extension Duration {
    /// Whole and fractional seconds, for arithmetic with `Date`.
    public var seconds: Double {
        let (whole, attoseconds) = components
        return Double(whole) + Double(attoseconds) / 1e18
    }

    /// Parses `90`, `90s`, `15m`, `2h`, `1d`, `250ms`. Returns nil for anything else, including negatives.
    public init?(parsingHuman text: String) {
        let units: [(suffix: String, seconds: Double)] = [
            ("ms", 0.001), ("s", 1), ("m", 60), ("h", 3600), ("d", 86400),
        ]
        var number = Substring(text)
        var scale = 1.0
        for unit in units where text.hasSuffix(unit.suffix) {
            number = text.dropLast(unit.suffix.count)
            scale = unit.seconds
            break
        }
        guard !number.isEmpty, number.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
            let value = Double(number), value.isFinite, value * scale <= 1e9
        else { return nil }
        self = .milliseconds(Int64((value * scale * 1000).rounded()))
    }

    /// `45s`, `15m`, `2h30m`, `3d` — compact and exact to the second.
    public var humanDescription: String {
        var remaining = Int64(seconds.rounded())
        if remaining == 0 {
            let milliseconds = Int64((seconds * 1000).rounded())
            return milliseconds == 0 ? "0s" : "\(milliseconds)ms"
        }
        let sign = remaining < 0 ? "-" : ""
        remaining = abs(remaining)
        var parts: [String] = []
        for (unit, size) in [("d", Int64(86400)), ("h", 3600), ("m", 60), ("s", 1)] where remaining >= size {
            parts.append("\(remaining / size)\(unit)")
            remaining %= size
        }
        return sign + parts.prefix(2).joined()
    }
}

extension Date {
    /// `self + duration`, so deadlines read as `start.adding(budget)`.
    public func adding(_ duration: Duration) -> Date { addingTimeInterval(duration.seconds) }

    /// The duration from `earlier` to `self` (negative when `earlier` is later).
    public func duration(since earlier: Date) -> Duration {
        .milliseconds(Int64((timeIntervalSince(earlier) * 1000).rounded()))
    }
}
