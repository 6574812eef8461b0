/// Every API error: `{"error": code, "reason": text}`. The code is stable; the reason says what to do.
public struct APIErrorBody: Hashable, Codable, Sendable {
    public var error: String
    public var reason: String

    public init(error: String, reason: String) {
        self.error = error
        self.reason = reason
    }
}
