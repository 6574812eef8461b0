import Crypto
import Foundation
import X509

/// The gateway's TLS identity: the operator's certificate and key, or a self-signed pair made on
/// first start (P-256, `localhost`, two years) and kept in the state directory for local use.
public enum GatewayCertificate {
    /// Paths of a certificate and key that exist: `certificate`/`key` when given, else the pair
    /// in `directory`, made now if it is not there yet.
    public static func loadOrCreate(in directory: String, now: Date) throws -> (certificate: String, key: String) {
        let certificatePath = directory + "/push-gateway.crt"
        let keyPath = directory + "/push-gateway.key"
        if FileManager.default.fileExists(atPath: certificatePath) && FileManager.default.fileExists(atPath: keyPath) {
            return (certificatePath, keyPath)
        }
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName {
            CommonName("bgd push gateway (self-signed)")
            OrganizationName("swift-background")
        }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(2 * 365 * 86400),
            issuer: name,
            subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                SubjectAlternativeNames([.dnsName("localhost")])
            },
            issuerPrivateKey: .init(key))
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try write(try certificate.serializeAsPEM().pemString, to: certificatePath)
        try write(key.pemRepresentation, to: keyPath)
        return (certificatePath, keyPath)
    }

    private static func write(_ text: String, to path: String) throws {
        FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
    }
}
