/// Text written into a systemd unit as systemd reads it back. One word of an `ExecStart=` line is
/// quoted when it has anything systemd would split at or expand (white space, quotes, `\`, `$`,
/// `%`, `;`): an unquoted path with a space in it (a checkout in "My Projects") was two words,
/// and the service failed to start (203/EXEC).
public enum SystemdWord {
    public static func quoted(_ word: String) -> String {
        guard word.isEmpty || word.contains(where: { " \t\"'\\$%;".contains($0) }) else { return word }
        let escaped = word.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "$", with: "$$")
        return "\"" + escapingSpecifiers(escaped) + "\""
    }

    /// `text` with systemd's specifiers (`%h`, `%n`, …) made literal, for a setting that expands
    /// them but takes the rest of its line as it is (`LoadCredential=`'s path).
    public static func escapingSpecifiers(_ text: String) -> String {
        text.replacingOccurrences(of: "%", with: "%%")
    }
}
