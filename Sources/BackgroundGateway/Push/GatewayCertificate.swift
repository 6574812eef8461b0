import Crypto
import Foundation
import X509

#if canImport(Glibc)
    import Glibc
#endif

/// The gateway's TLS identity: the operator's certificate and key, or a self-signed pair made on
/// first start (P-256, two years) and kept in the state directory. It names localhost, the
/// loopback addresses, the machine's host name and the names it is asked for (the address it
/// listens on, a relay's `--certificate-name`): a client checks that the name it connected to
/// is in it.
public enum GatewayCertificate {
    /// Paths of a certificate and key that exist: the pair in `directory`, made now if it is not
    /// there yet. A pair made before that lacks one of `names` is not replaced behind the
    /// clients that trust it: `MissingNames` says what to do.
    public static func loadOrCreate(
        in directory: String, names: [String] = [], now: Date
    ) throws -> (certificate: String, key: String) {
        let certificatePath = directory + "/push-gateway.crt"
        let keyPath = directory + "/push-gateway.key"
        if FileManager.default.fileExists(atPath: certificatePath) && FileManager.default.fileExists(atPath: keyPath) {
            let named: [String]
            do {
                named = try certifiedNames(inFile: certificatePath)
            } catch {
                throw Damaged(certificate: certificatePath, key: keyPath, error: error)
            }
            let missing = names.filter { !named.contains(normalised($0)) }
            guard missing.isEmpty else {
                throw MissingNames(certificate: certificatePath, missing: missing, named: named)
            }
            return (certificatePath, keyPath)
        }
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName {
            CommonName("bgd push gateway (self-signed)")
            OrganizationName("swift-background")
        }
        var everyName = ["localhost", "127.0.0.1", "::1"]
        let host = ProcessInfo.processInfo.hostName
        for candidate in [host] + names where !candidate.isEmpty && !everyName.contains(normalised(candidate)) {
            everyName.append(normalised(candidate))
        }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
            notValidBefore: now.addingTimeInterval(-3600), notValidAfter: now.addingTimeInterval(2 * 365 * 86400),
            issuer: name,
            subject: name, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                SubjectAlternativeNames(everyName.map(generalName))
            },
            issuerPrivateKey: .init(key))
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        try write(try certificate.serializeAsPEM().pemString, to: certificatePath)
        try write(key.pemRepresentation, to: keyPath)
        return (certificatePath, keyPath)
    }

    /// The pair made before is there but cannot be read as a certificate (truncated, overwritten):
    /// not replaced behind the clients that trust it — the operator removes it.
    public struct Damaged: Error, CustomStringConvertible {
        public var certificate: String
        public var key: String
        public var error: any Error
        public var description: String {
            "cannot read the gateway's own certificate \(certificate) (\(error)): remove it and \(key), and a new pair is made at the next start (clients that trusted the old certificate must then be given the new one)"
        }
    }

    /// A self-signed certificate made before without a name its clients now use.
    public struct MissingNames: Error, CustomStringConvertible {
        public var certificate: String
        public var missing: [String]
        public var named: [String]
        public var description: String {
            "\(certificate) names \(named.joined(separator: ", ")) but not \(missing.joined(separator: ", ")), which clients "
                + "would connect to and refuse it for: move it and its .key away to have a new one made (clients that "
                + "trust the old one must then be given the new one), or give your own certificate and key"
        }
    }

    /// The DNS names and addresses (as text) a PEM certificate file names.
    public static func certifiedNames(inFile path: String) throws -> [String] {
        let certificate = try Certificate(pemEncoded: String(contentsOfFile: path, encoding: .utf8))
        guard let alternatives = try certificate.extensions.subjectAlternativeNames else { return [] }
        return alternatives.compactMap { name in
            switch name {
            case .dnsName(let dns): return dns.lowercased()
            case .ipAddress(let bytes): return address(Array(bytes.bytes))
            default: return nil
            }
        }
    }

    /// How a name is compared: DNS names in lower case, IPv6 addresses without brackets.
    static func normalised(_ name: String) -> String {
        let bare = name.hasPrefix("[") && name.hasSuffix("]") ? String(name.dropFirst().dropLast()) : name
        return addressBytes(bare).flatMap(address) ?? bare.lowercased()
    }

    private static func generalName(_ name: String) -> GeneralName {
        // An ASN1OctetString (SwiftASN1's, which X509 brings along).
        if let bytes = addressBytes(name) { return .ipAddress(.init(contentBytes: ArraySlice(bytes))) }
        return .dnsName(name)
    }

    private static func addressBytes(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }

    private static func address(_ bytes: [UInt8]) -> String? {
        let family = bytes.count == 4 ? AF_INET : bytes.count == 16 ? AF_INET6 : nil
        guard let family else { return nil }
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let ok = bytes.withUnsafeBytes { inet_ntop(family, $0.baseAddress, &text, socklen_t(text.count)) != nil }
        return ok ? String(cString: text) : nil
    }

    private static func write(_ text: String, to path: String) throws {
        FileManager.default.createFile(atPath: path, contents: Data(text.utf8), attributes: [.posixPermissions: 0o600])
    }
}
