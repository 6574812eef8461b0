import Foundation

/// An http or https URL something here connects to — a transfer's origin and each redirect, the
/// push relay, a gateway bgctl sends to — checked before any connection is made. NIO traps on a
/// port it cannot hold (`https://127.0.0.1:99999`), so such a URL must never reach it.
public enum ServerURL {
    /// Why `url` cannot be connected to, or nil: http or https, a host, a port from 1 to 65535, at
    /// most 8 KiB. The reason reads after the URL ("… has port 99999; a port is 1 to 65535").
    public static func problem(with url: URL) -> String? {
        guard let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme), url.host?.isEmpty == false
        else {
            return "must be an http or https URL with a host"
        }
        if let port = url.port, !(1...65535).contains(port) { return "has port \(port); a port is 1 to 65535" }
        if url.absoluteString.utf8.count > 8192 { return "is at most 8192 bytes" }
        return nil
    }

    /// The same for a URL as typed: one Foundation cannot read at all is said so.
    public static func problem(with text: String) -> String? {
        guard let url = URL(string: text) else { return "is not a URL" }
        return problem(with: url)
    }
}
