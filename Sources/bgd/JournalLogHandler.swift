import BackgroundDaemon
import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// Logs for the journal. Under systemd (`JOURNAL_STREAM` set and journald's socket there) each
/// record is one datagram in journald's native protocol: `MESSAGE=`, `PRIORITY=` and one field
/// per metadata key (`app.id` becomes `APP_ID=`, `wake.reason` `WAKE_REASON=`), so
/// `journalctl --user -u bgd APP_ID=com.example.newsfeed` finds an app's lines. Otherwise (or if
/// a datagram cannot be sent) one line on stderr in the form journald's stream reads: a
/// `<priority>` prefix (syslog levels, so `journalctl -p warning` works), the logger's label, the
/// message, then the metadata as `key=value` pairs sorted by key, values with spaces quoted.
/// No timestamp: the journal stamps each record. Used when stderr is the journal or with
/// `--log-format journal`.
struct JournalLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .notice
    var metadata: Logger.Metadata = [:]
    /// journald's native socket (`/run/systemd/journal/socket`), when records go there.
    var nativeSocket: String?

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        if let nativeSocket,
            JournalSocket.shared.send(Self.native(event.level, label, event.message, all), to: nativeSocket)
        {
            return
        }
        var text = "<\(Self.priority(event.level))>\(label): \(Self.flatten(event.message.description))"
        for (key, value) in all.sorted(by: { $0.key < $1.key }) {
            text += " \(key)=\(Self.quoted(Self.flatten("\(value)")))"
        }
        text += "\n"
        _ = text.utf8CString.withUnsafeBufferPointer { write(STDERR_FILENO, $0.baseAddress, $0.count - 1) }
    }

    /// The record as journald's native protocol: `FIELD=value` lines (values flattened to one
    /// line, so the simple form serves).
    static func native(
        _ level: Logger.Level, _ label: String, _ message: Logger.Message, _ metadata: Logger.Metadata
    ) -> String {
        var fields = [
            "MESSAGE=\(label): \(flatten(message.description))", "PRIORITY=\(priority(level))",
            "SYSLOG_IDENTIFIER=bgd", "BGD_LOGGER=\(label)",
        ]
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            fields.append("\(fieldName(key))=\(flatten("\(value)"))")
        }
        return fields.joined(separator: "\n") + "\n"
    }

    /// A journal field name: upper case letters, digits and underscores, not starting with an
    /// underscore or a digit (`app.id` → `APP_ID`).
    static func fieldName(_ key: String) -> String {
        var name = String(key.uppercased().map { $0.isASCII && ($0.isLetter || $0.isNumber) ? $0 : "_" })
        while name.hasPrefix("_") { name.removeFirst() }
        if name.first?.isNumber ?? true { name = "BGD_" + name }
        return name
    }

    /// syslog priorities: journald maps `<N>` to the entry's PRIORITY.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// One record, one line.
    static func flatten(_ text: String) -> String { text.replacingOccurrences(of: "\n", with: "\\n") }

    static func quoted(_ value: String) -> String {
        value.contains(" ") || value.contains("\"") || value.isEmpty
            ? "\"" + value.replacingOccurrences(of: "\"", with: "\\\"") + "\"" : value
    }
}

/// One datagram socket for every record sent to journald.
final class JournalSocket: @unchecked Sendable {
    static let shared = JournalSocket()
    // @unchecked: the descriptor is made once and only used by sendto, which is thread-safe.
    private let descriptor = UnixDatagram.makeSocket()

    /// Whether journald took it (a record too large, or no journald, falls back to stderr).
    func send(_ record: String, to path: String) -> Bool {
        UnixDatagram.send(record, to: path, from: descriptor)
    }
}
