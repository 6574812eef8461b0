/// Checksums and device tokens are ASCII hexadecimal. `Character.isHexDigit` also takes the
/// fullwidth forms (`０`–`９`, `ａ`–`ｆ`), which passed the check and then never matched: a
/// download with such a checksum was fetched whole and always failed at the end.
public enum HexDigits {
    /// Whether `text` is `length` ASCII hexadecimal digits, either case.
    public static func matches(_ text: some StringProtocol, length: ClosedRange<Int>) -> Bool {
        length.contains(text.utf8.count)
            && text.utf8.allSatisfy { byte in
                (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte | 0x20)
            }
    }
}
