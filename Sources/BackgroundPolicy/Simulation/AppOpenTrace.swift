import Foundation

/// Recorded app opens of real users, to replay through a policy in virtual time.
public struct AppOpenTrace: Hashable, Sendable {
    /// One app on one user's device.
    public struct Key: Hashable, Comparable, Sendable {
        public var user: String
        public var app: String
        public init(user: String, app: String) {
            self.user = user
            self.app = app
        }
        public static func < (lhs: Key, rhs: Key) -> Bool { (lhs.user, lhs.app) < (rhs.user, rhs.app) }
    }

    /// Open times per (user, app), each list in time order.
    public let opens: [Key: [Date]]

    public init(opens: [Key: [Date]]) { self.opens = opens.mapValues { $0.sorted() } }

    public var users: [String] { Set(opens.keys.map(\.user)).sorted() }
    public var openCount: Int { opens.values.reduce(0) { $0 + $1.count } }

    /// A user's opens of every app, in time order (the order a replay meets them).
    public func events(of user: String) -> [(at: Date, app: String)] {
        opens.filter { $0.key.user == user }
            .flatMap { key, times in times.map { (at: $0, app: key.app) } }
            .sorted { ($0.at, $0.app) < ($1.at, $1.app) }
    }

    /// A user's first and last open of any app.
    public func span(of user: String) -> ClosedRange<Date>? {
        let times = opens.filter { $0.key.user == user }.values.flatMap { $0 }
        guard let first = times.min(), let last = times.max() else { return nil }
        return first...last
    }

    /// What went wrong reading a trace, with the line.
    public enum ParseError: Error, Hashable, CustomStringConvertible {
        case empty
        case missingColumns(found: [String])
        case malformedLine(number: Int, text: String, problem: String)

        public var description: String {
            switch self {
            case .empty: "the trace is empty; it needs a header user,app,open_utc and one line per open"
            case .missingColumns(let found):
                "the header must name the columns user, app and open_utc (found: \(Self.excerpt(found.prefix(8).map { String($0.prefix(40)) }.joined(separator: ", "))))"
            case .malformedLine(let number, let text, let problem): "line \(number): \(problem): \(Self.excerpt(text))"
            }
        }

        /// At most 120 characters of what was read, marked when cut: an error never echoes a
        /// megabyte field back.
        static func excerpt(_ text: String) -> String {
            text.count <= 120 ? text : String(text.prefix(120)) + "…"
        }
    }

    /// Reads CSV with a header naming `user`, `app` and `open_utc` (Unix seconds). Lines may come
    /// in any order; blank lines are skipped; a line repeated exactly counts once (a second copy
    /// scored as an open of content 0 minutes old). Quoting is not supported: the fields never
    /// need it. A spreadsheet's export reads too: a byte-order mark, an empty last column.
    public static func parse(csv text: String) -> Result<AppOpenTrace, ParseError> {
        var lines = text.split(omittingEmptySubsequences: false, whereSeparator: \.isNewline).enumerated()
            .filter { !$0.element.trimmingCharacters(in: .whitespaces).isEmpty }.makeIterator()
        guard let header = lines.next() else { return .failure(.empty) }
        let columns = header.element.trimmingPrefix("\u{FEFF}").split(separator: ",", omittingEmptySubsequences: false)
            .map { $0.trimmingCharacters(in: .whitespaces) }
        guard let user = columns.firstIndex(of: "user"), let app = columns.firstIndex(of: "app"),
            let time = columns.firstIndex(of: "open_utc")
        else { return .failure(.missingColumns(found: columns)) }
        var opens: [Key: [Date]] = [:]
        while let (offset, line) = lines.next() {
            let fields = line.split(separator: ",", omittingEmptySubsequences: false).map {
                $0.trimmingCharacters(in: .whitespaces)
            }
            let number = offset + 1
            guard fields.count == columns.count else {
                return .failure(
                    .malformedLine(
                        number: number, text: String(line.prefix(200)), problem: "expected \(columns.count) fields"))
            }
            guard !fields[user].isEmpty, !fields[app].isEmpty else {
                return .failure(
                    .malformedLine(
                        number: number, text: String(line.prefix(200)), problem: "user and app must not be empty"))
            }
            // Between 2000 and 2100: anything else is a unit mistake (milliseconds) or garbage.
            guard let seconds = Double(fields[time]), seconds.isFinite, (946_684_800...4_102_444_800).contains(seconds)
            else {
                return .failure(
                    .malformedLine(
                        number: number, text: String(line.prefix(200)),
                        problem: "open_utc must be Unix seconds (2000–2100)"))
            }
            opens[Key(user: fields[user], app: fields[app]), default: []].append(Date(timeIntervalSince1970: seconds))
        }
        guard !opens.isEmpty else { return .failure(.empty) }  // a header alone has nothing to score
        return .success(AppOpenTrace(opens: opens.mapValues { Array(Set($0)) }))
    }
}
