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

    /// The ids and topics are checked here, while parsing, so a bad one is a usage error shown
    /// with the subcommand's usage (a ValidationError from run() gets the top command's).
    public func validate() throws {
        let ids = ProviderKeyRegistration(keyID: keyID, teamID: teamID, topics: topicList, publicKeyPEM: "")
        if let problem = ids.problem { throw ValidationError(problem) }
    }

    var topicList: [String] { topics.split(separator: ",").map { String($0).trimmingCharacters(in: .whitespaces) } }

    /// The registration, or the problem with the key file (missing, unreadable, not a key).
    public func registration() throws(InputFileProblem) -> ProviderKeyRegistration {
        try .fromKeyFile(file, keyID: keyID, teamID: teamID, topics: topics)
    }
}
