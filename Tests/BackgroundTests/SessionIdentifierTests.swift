import Background
import Testing

/// A session's identifier is any string, as iOS takes; bgd refuses control characters in the
/// names `bgctl` prints, so the library makes them spaces where the configuration is made, and
/// the session and its events agree on the name.
struct SessionIdentifierTests {
    @Test func controlCharactersBecomeSpaces() {
        #expect(BackgroundURLSessionConfiguration.background(withIdentifier: "a\tb\u{1B}[2J").identifier == "a b [2J")
        #expect(BackgroundURLSessionConfiguration.background(withIdentifier: "downloads").identifier == "downloads")
    }
}
