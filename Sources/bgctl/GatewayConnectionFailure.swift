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
        if error is PriorKnowledgePost.TimedOut { return "no answer from \(gateway) within --timeout" }
        if let failure = error as? HTTPClientError, failure == .connectTimeout || failure == .deadlineExceeded {
            return "no answer from \(gateway) within --timeout"
        }
        if let failure = error as? HTTPClientError, failure == .remoteConnectionClosed, gateway.hasPrefix("http://") {
            return "\(gateway) closed the connection to HTTP/2 with prior knowledge and to HTTP/1.1 — is it a push gateway? (bgd serves http:// only with --push-plaintext or --push-http1; otherwise it is https://)"
        }
        if let hint = TLSFailure.hint(for: "\(error)", peer: gateway, trustOption: "--certificate") {
            return "cannot connect to \(gateway): \(hint)"
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

/// What a TLS failure means for whoever connects, from its description (NIOSSL's errors print the
/// BoringSSL reason; they are matched by it): the peer's certificate not trusted, or not naming
/// the host connected to, or a certificate file that is not one.
enum TLSFailure {
    static func hint(for description: String, peer: String, trustOption: String) -> String? {
        if description.contains("CERTIFICATE_VERIFY_FAILED") {
            return "its certificate is not one this machine trusts — pass the peer's certificate with \(trustOption) FILE "
                + "(a self-signed bgd's or bgrelay's push-gateway.crt, in its state directory)"
        }
        if description.contains("failedToValidateHostname") {
            let host = URL(string: peer)?.host ?? peer
            return "its certificate does not name \(host) — connect by a name it has (`openssl x509 -in CRT -noout -ext "
                + "subjectAltName` lists them), or have it made with that name (bgrelay --certificate-name, bgd "
                + "--push-certificate-name)"
        }
        if description.contains("failedToLoadCertificate") {
            return "the certificate file given with \(trustOption) is not a PEM certificate"
        }
        if description.contains("unsupportedScheme") {
            return "the URL must start with https:// (or http:// for a plaintext gateway)"
        }
        return nil
    }
}
