import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A certificate and key given as files that TLS cannot use: said with both paths and what the
/// files must hold (NIOSSL says only `failedToLoadCertificate`).
public struct UnusableCertificatePair: Error, CustomStringConvertible {
    public var certificate: String
    public var key: String
    public var error: any Error

    public var description: String {
        for path in [certificate, key] where access(path, R_OK) != 0 {
            return "cannot read \(path): \(String(cString: strerror(errno)))"
        }
        return
            "cannot use the TLS certificate \(certificate) with the key \(key) (\(error)): give a PEM certificate chain and the private key that goes with it"
    }
}
