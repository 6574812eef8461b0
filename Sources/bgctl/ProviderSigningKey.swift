import BackgroundProviderKeys
import Crypto

/// The provider's .p8 private key, which `push send` and `push jwt` sign tokens with.
enum ProviderSigningKey {
    static func load(_ path: String) throws(InputFileProblem) -> P256.Signing.PrivateKey {
        let pem = try InputFile.text(path, what: "a P-256 private key in PEM")
        guard let key = try? P256.Signing.PrivateKey(pemRepresentation: pem) else {
            throw InputFileProblem(.malformed, "\(path) is not a P-256 private key in PEM (an APNs .p8 file)")
        }
        return key
    }
}
