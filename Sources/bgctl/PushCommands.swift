import ArgumentParser
import Background
import BackgroundModel
import BackgroundProviderKeys
import Foundation

extension BGCtl {
    struct Push: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "push",
            abstract: "Device tokens and provider keys for bgd's APNs-compatible push gateway.",
            subcommands: [Token.self, Keys.self, Send.self, Jwt.self, Log.self, Relay.self])

        struct Relay: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "relay",
                abstract: "The push relay bgd connects out to, for providers that cannot reach this machine.",
                subcommands: [Status.self, Enroll.self], defaultSubcommand: Status.self)

            struct Status: AsyncParsableCommand {
                static let configuration = CommandConfiguration(
                    commandName: "status",
                    abstract: "Whether bgd's uplink to its relay is up.")
                @OptionGroup var options: DaemonOptions

                func run() async throws {
                    if options.json { return try await options.printAnswer(.get, "/v1/push/relay") }
                    let status = try await options.call {
                        try await $0.send(.get, "/v1/push/relay", as: PushRelayStatus.self)
                    }
                    guard status.state != .off, let url = status.url else {
                        return print("No push relay. Enroll with one: bgctl push relay enroll https://RELAY:2198")
                    }
                    let now = SystemClock().now
                    var line = "\(status.state.rawValue) to \(url)"
                    if let device = status.device { line += " as device \(device)" }
                    if status.state == .connected, let transport = status.transport {
                        line += transport == "lines" ? " (lines on TLS)" : " (an HTTP/2 stream)"
                    }
                    if let since = status.since { line += ", since \(TextFormat.when(since, now: now))" }
                    print(line + "; \(TextFormat.count(status.received, "push", plural: "pushes")) received since bgd started.")
                    if let error = status.lastError {
                        print(
                            "Last error: "
                                + (TLSFailure.hint(for: error, peer: url, trustOption: "--push-relay-ca").map {
                                    "cannot connect to \(url): \($0)"
                                } ?? error))
                    }
                    if let retry = status.retryAt { print("Next attempt: \(TextFormat.when(retry, now: now))") }
                    if let refusal = status.lastRefusal {
                        print(
                            "Last refusal: \(refusal)"
                                + (refusal.hasPrefix("tokenTaken")
                                    ? " (another device of this relay holds that app token — bgd enrolled again? the app must register for a new token)"
                                    : ""))
                    }
                }
            }

            struct Enroll: AsyncParsableCommand {
                static let configuration = CommandConfiguration(
                    commandName: "enroll",
                    abstract:
                        "Enroll bgd with a relay: it gets a device credential (kept 0600 in its state directory) and connects at once.")
                @OptionGroup var options: DaemonOptions
                @Argument(help: "The relay's uplink, e.g. https://relay.example.net:2198.") var url: String
                @Option(help: "A CA certificate (PEM) to trust for the relay (a self-signed relay's push-gateway.crt).")
                var certificate: String?
                @Option(help: "The token the relay asks of a device to enroll, if it was started with --enrollment-token.")
                var enrollmentToken: String?
                @Flag(
                    help:
                        "Enroll anew though bgd is enrolled already: a new device, whose apps need new device tokens (the relay keeps the old ones for the old device)."
                )
                var replace = false

                /// The URL (one node or several, comma-separated) as bgd will connect to it.
                func validate() throws {
                    for node in url.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) {
                        if let problem = ServerURL.problem(with: node) {
                            throw ValidationError("'\(node)' \(problem); a relay's uplink is like https://relay.example.net:2198")
                        }
                    }
                }

                func run() async throws {
                    let certificate = self.certificate.map { URL(fileURLWithPath: $0).standardizedFileURL.path }
                    // A file that is not a certificate (a provider's .p8 key, say) is said so, not
                    // found later as a relay TLS cannot reach.
                    if let certificate {
                        let pem = options.input { () throws(InputFileProblem) in
                            try InputFile.text(certificate, what: "a PEM certificate")
                        }
                        guard pem.contains("-----BEGIN CERTIFICATE-----") else {
                            options.input { () throws(InputFileProblem) -> Void in
                                throw InputFileProblem(
                                    .malformed, "\(certificate) is not a PEM certificate (no -----BEGIN CERTIFICATE-----)")
                            }
                            return
                        }
                    }
                    let status = try await options.call {
                        try await $0.send(
                            .post, "/v1/push/relay",
                            body: PushRelayEnrollRequest(
                                url: url, certificate: certificate, enrollmentToken: enrollmentToken,
                                replace: replace ? true : nil),
                            as: PushRelayStatus.self)
                    }
                    if options.json { return try options.printJSON(status) }
                    print("Enrolled with \(url) as device \(status.device ?? "?"); bgctl push relay status shows the uplink.")
                }
            }
        }

        struct Log: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "log",
                abstract: "The pushes an app was sent, what became of each (delivered, held, replaced, dropped) and how many runs it went to.")
            @OptionGroup var options: DaemonOptions
            @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID
            @Option(parsing: .unconditional, help: "At most this many, newest first (1 to 1000).") var limit: Int = 20

            func validate() throws { try checkCount(limit, "--limit", in: 1...1000) }

            func run() async throws {
                if options.json { return try await options.printAnswer(.get, "/v1/apps/\(app)/pushes?limit=\(limit)") }
                let pushes = try await options.call {
                    try await $0.send(.get, "/v1/apps/\(app)/pushes?limit=\(limit)", as: [PushRecord].self)
                }
                guard !pushes.isEmpty else {
                    return print("No pushes for \(app). A provider sends them to its token: bgctl push token \(app)")
                }
                let now = SystemClock().now
                TextFormat.table(
                    header: ["RECEIVED", "TYPE", "STATE", "TRIES", "WHY", "APNS-ID"],
                    rows: pushes.map {
                        [
                            TextFormat.when($0.receivedAt, now: now), $0.pushType, $0.state.rawValue, "\($0.attempts)",
                            ($0.reasonCode.map { "\($0.rawValue): " } ?? "") + TextFormat.reason($0.reason ?? "-", now: now), $0.apnsID,
                        ]
                    })
            }
        }

        struct Token: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "token",
                abstract: "Print an app's device token, for a provider under test.")
            @OptionGroup var options: DaemonOptions
            @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID
            @Flag(help: "Make one if the app has none yet (as registerForRemoteNotifications does).") var create = false

            func run() async throws {
                let info = try await options.call {
                    try await $0.send(create ? .post : .get, "/v1/apps/\(app)/push/token", as: DeviceTokenInfo.self)
                }
                if options.json { return try options.printJSON(info) }
                print(info.token)
            }
        }

        struct Keys: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "keys",
                abstract: "Provider keys (ES256, .p8) whose tokens bgd accepts.",
                subcommands: [List.self, Add.self, Remove.self],
                defaultSubcommand: List.self)

            struct List: AsyncParsableCommand {
                static let configuration = CommandConfiguration(
                    commandName: "list",
                    abstract: "List the registered keys.")
                @OptionGroup var options: DaemonOptions

                func run() async throws {
                    if options.json { return try await options.printAnswer(.get, "/v1/push/keys") }
                    let keys = try await options.call {
                        try await $0.send(.get, "/v1/push/keys", as: [ProviderKeyRegistration].self)
                    }
                    guard !keys.isEmpty else {
                        return print(
                            "No provider keys. Add one with: bgctl push keys add --key-id … --team-id … --topics APP KEY.p8"
                        )
                    }
                    TextFormat.table(
                        header: ["KEY ID", "TEAM ID", "TOPICS"],
                        rows: keys.map { [$0.keyID, $0.teamID, $0.topics.joined(separator: ",")] })
                }
            }

            struct Add: AsyncParsableCommand {
                static let configuration = CommandConfiguration(
                    commandName: "add",
                    abstract: "Register a provider key: only its public half is sent to bgd; the .p8 stays here.")
                @OptionGroup var options: DaemonOptions
                @OptionGroup var key: ProviderKeyArguments

                func run() async throws {
                    let registration = options.input { () throws(InputFileProblem) in try key.registration() }
                    let stored = try await options.call {
                        try await $0.send(.post, "/v1/push/keys", body: registration, as: ProviderKeyRegistration.self)
                    }
                    if options.json { return try options.printJSON(stored) }
                    print(
                        "Provider key \(stored.keyID) (team \(stored.teamID)) may push to \(stored.topics.joined(separator: ", "))."
                    )
                }
            }

            struct Remove: AsyncParsableCommand {
                static let configuration = CommandConfiguration(
                    commandName: "remove",
                    abstract: "Forget a provider key: its tokens are refused from now on.")
                @OptionGroup var options: DaemonOptions
                @Argument(help: "The key's id (bgctl push keys lists them).") var keyID: String

                // It goes into the request's path: a space made a URL that could not be sent, told
                // as "cannot reach bgd", and `ID?x` removed ID.
                func validate() throws {
                    guard ProviderKeyRegistration.isID(keyID) else {
                        throw ValidationError(
                            "'\(keyID)' is not a Key ID: 10 characters, A-Z and 0-9, as bgctl push keys lists them")
                    }
                }

                func run() async throws {
                    try await options.call { try await $0.send(.delete, "/v1/push/keys/\(keyID)") }
                    options.done("removeKey", ["keyID": keyID], sentence: "Removed provider key \(keyID).")
                }
            }
        }
    }
}
