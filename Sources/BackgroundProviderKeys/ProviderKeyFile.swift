import BackgroundModel
import Crypto
import Foundation

extension ProviderKeyRegistration {
    /// The registration for an APNs key file (the .p8's PKCS#8 PEM, or its public key): only the
    /// public half is kept, derived here, so a private key never leaves the provider's machine.
    /// `topics` are comma-separated app ids. bgctl (for bgd) and bgrelay register keys this way.
    public static func fromKeyFile(
        _ path: String, keyID: String, teamID: String, topics: String
    ) throws(InputFileProblem) -> ProviderKeyRegistration {
        let pem = try InputFile.text(path, what: "a P-256 key in PEM")
        let publicKey: String
        if let privateKey = try? P256.Signing.PrivateKey(pemRepresentation: pem) {
            publicKey = privateKey.publicKey.pemRepresentation
        } else if let key = try? P256.Signing.PublicKey(pemRepresentation: pem) {
            publicKey = key.pemRepresentation
        } else {
            throw InputFileProblem(.malformed, "\(path) is not a P-256 key in PEM (an APNs .p8 file)")
        }
        let registration = ProviderKeyRegistration(
            keyID: keyID, teamID: teamID,
            topics: topics.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) },
            publicKeyPEM: publicKey)
        // The ids are checked by ProviderKeyArguments.validate() before; a caller that skipped it
        // still gets the reason, not a registration bgd would refuse.
        if let problem = registration.problem { throw InputFileProblem(.malformed, problem) }
        return registration
    }
}
