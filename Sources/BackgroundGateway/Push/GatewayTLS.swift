import NIOSSL

/// The TLS a gateway serves with, from a certificate chain and key given as PEM files.
public enum GatewayTLS {
    /// The server configuration, made once into a context: a key that is not the certificate's
    /// is found only then, so it is said here as what it is (`UnusableCertificatePair`), not
    /// later as a port that cannot listen. `bgd --check` calls it too, so a pair bgd would refuse
    /// at start is refused by the check.
    public static func server(certificate: String, key: String, protocols: [String]) throws -> TLSConfiguration {
        do {
            let chain = try NIOSSLCertificate.fromPEMFile(certificate).map { NIOSSLCertificateSource.certificate($0) }
            let privateKey = try NIOSSLPrivateKey(file: key, format: .pem)
            var tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(privateKey))
            tls.minimumTLSVersion = .tlsv12
            tls.applicationProtocols = protocols
            _ = try NIOSSLContext(configuration: tls)
            return tls
        } catch {
            throw UnusableCertificatePair(certificate: certificate, key: key, error: error)
        }
    }
}
