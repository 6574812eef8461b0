import Foundation
import Logging

#if canImport(Glibc)
    import Glibc
#endif

/// One log line per record on stderr, in the form journald reads: a `<priority>` prefix
/// (syslog levels, so `journalctl -p warning` works), the logger's label, the message, then the
/// metadata as `key=value` pairs sorted by key (`app.id=… run.id=…`), values with spaces quoted.
/// No timestamp: the journal stamps each line. Used when stderr is the journal (systemd sets
/// `JOURNAL_STREAM`) or with `--log-format journal`.
struct JournalLogHandler: LogHandler {
    let label: String
    var logLevel: Logger.Level = .notice
    var metadata: Logger.Metadata = [:]

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(
        level: Logger.Level, message: Logger.Message, metadata explicit: Logger.Metadata?, source: String, file: String,
        function: String, line: UInt
    ) {
        let all = metadata.merging(explicit ?? [:]) { $1 }
        var text = "<\(Self.priority(level))>\(label): \(Self.flatten(message.description))"
        for (key, value) in all.sorted(by: { $0.key < $1.key }) {
            text += " \(key)=\(Self.quoted(Self.flatten("\(value)")))"
        }
        text += "\n"
        _ = text.utf8CString.withUnsafeBufferPointer { write(STDERR_FILENO, $0.baseAddress, $0.count - 1) }
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
