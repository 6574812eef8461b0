/// The secret an app presents (`Authorization: Bearer …`) on every call it makes to bgd.
///
/// bgd keeps only a hash of it; the plaintext is shown once, when the app is registered, and
/// handed to processes bgd launches through `BGD_APP_TOKEN`.
public struct AppToken: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    /// Redacted, so tokens never end up in logs by accident.
    public var description: String { "AppToken(…)" }
}
