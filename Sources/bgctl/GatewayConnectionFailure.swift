import AsyncHTTPClient
import Foundation
import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#endif

/// Why `bgctl push send` got no answer from the gateway, in one line a person can act on —
/// not SwiftNIO's description of its connection attempts (`SingleConnectionFailure(…)`).
enum GatewayConnectionFailure {
    static func describe(_ error: any Error, gateway: String) -> String {
        if let failure = error as? NIOConnectionError {
            if failure.dnsAError != nil || failure.dnsAAAAError != nil, failure.connectionErrors.isEmpty {
                return "cannot connect to \(gateway): the host \(failure.host) does not resolve"
            }
            // Every address tried failed; the first one's reason speaks for them.
            if let code = failure.connectionErrors.lazy.compactMap({ ($0.error as? IOError)?.errnoCode }).first {
                return "cannot connect to \(gateway): " + reason(errno: code)
            }
            if let first = failure.connectionErrors.first {
                return "cannot connect to \(gateway): \(oneLine(first.error))"
            }
        }
        if let failure = error as? IOError { return "cannot connect to \(gateway): " + reason(errno: failure.errnoCode) }
        if let failure = error as? HTTPClientError, failure == .connectTimeout || failure == .deadlineExceeded {
            return "no answer from \(gateway) within --timeout"
        }
        return "cannot reach the push gateway at \(gateway): \(oneLine(error))"
    }

    private static func reason(errno code: Int32) -> String {
        if code == ECONNREFUSED {
            return "connection refused — is bgd's push gateway listening there? (`bgctl status` shows its port)"
        }
        return String(cString: strerror(code)).lowercased()
    }

    /// One line, whatever the TLS or connection error looks like.
    private static func oneLine(_ error: any Error) -> String {
        "\(error)".split(whereSeparator: \.isNewline).joined(separator: " ")
    }
}
