/// Names bgd keeps and prints back to an operator's terminal (`bgctl tasks`, `bgctl download`):
/// a control character in one (an escape sequence, a newline) would run in that terminal or break
/// its table, so bgd refuses it at the door, as it refuses a task identifier out of its alphabet.
public enum PrintableText {
    /// Whether `text` holds a control character (C0, DEL or C1: Unicode's `Cc`).
    public static func hasControlCharacters(_ text: String) -> Bool {
        text.unicodeScalars.contains { $0.properties.generalCategory == .control }
    }

    /// Why the `field` of a request cannot be `text`, or nil.
    public static func problem(with text: String, in field: String) -> String? {
        hasControlCharacters(text)
            ? "'\(field)' must be printable text: no control characters (newlines, escapes)" : nil
    }

    /// `text` with each control character made a space: what the library sends for a name its
    /// caller gave, where iOS takes any string.
    public static func printable(_ text: String) -> String {
        String(
            String.UnicodeScalarView(
                text.unicodeScalars.map { $0.properties.generalCategory == .control ? " " : $0 }))
    }
}
