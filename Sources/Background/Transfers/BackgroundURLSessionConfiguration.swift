import BackgroundModel
import Foundation

/// `URLSessionConfiguration.background(withIdentifier:)`: what bgd needs to carry a session's
/// transfers when the app is gone.
public struct BackgroundURLSessionConfiguration: Sendable {
    public let identifier: String
    /// Wait for good conditions (unmetered network, mains power) before starting.
    public var isDiscretionary = false
    /// May transfers run on a metered network?
    public var allowsExpensiveNetworkAccess = true
    /// Give up on a transfer this long after it was handed over (7 days, as on iOS).
    public var timeoutIntervalForResource: TimeInterval = 7 * 86400
    /// Launch the app for the session's events when it is not running (iOS's default: yes).
    public var sessionSendsLaunchEvents = true

    /// Any identifier, as iOS takes: control characters (which bgd refuses in names it prints)
    /// become spaces, here, so that the session and its events agree on the name.
    public static func background(withIdentifier identifier: String) -> BackgroundURLSessionConfiguration {
        BackgroundURLSessionConfiguration(identifier: PrintableText.printable(identifier))
    }
}
