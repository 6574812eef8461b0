import ArgumentParser
import BackgroundModel

/// The arguments that register a provider key, as `bgctl push keys add` and `bgrelay keys add`
/// both take them.
public struct ProviderKeyArguments: ParsableArguments {
    @Option(help: "The 10-character Key ID (the JWT's kid).") public var keyID: String
    @Option(help: "The 10-character Team ID (the JWT's iss).") public var teamID: String
    @Option(help: "App ids the key may push to, comma-separated.") public var topics: String
    @Argument(help: "The key file (PKCS#8 PEM, as APNs issues .p8 files, or its public key).") public var file: String

    public init() {}

    /// The registration, or a validation error that says what is wrong with the file or ids.
    public func registration() throws -> ProviderKeyRegistration {
        do {
            return try .fromKeyFile(file, keyID: keyID, teamID: teamID, topics: topics)
        } catch {
            throw ValidationError(error.description)
        }
    }
}
