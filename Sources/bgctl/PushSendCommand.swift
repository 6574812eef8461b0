import ArgumentParser
import Background
import BackgroundModel
import BackgroundProviderKeys
import Crypto
import Foundation

extension BGCtl.Push {
    struct Send: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "send",
            abstract: "Send a push through bgd's real gateway, as a provider would (HTTP/2, TLS, an ES256 token).",
            discussion: """
                Signs a provider token with your .p8 key (registered with `bgctl push keys add`) and posts the
                payload to /3/device/<token> on the gateway, trusting the certificate bgd made:
                  bgctl push send com.example.newsfeed payload.json --key AuthKey_ABC123DEFG.p8 --key-id ABC123DEFG --team-id TEAM123456
                To an http:// gateway (bgd --push-plaintext or --push-http1) it sends HTTP/2 with prior knowledge,
                or HTTP/1.1 if the gateway answers that as an HTTP/1.1 server.
                """)
        @OptionGroup var options: DaemonOptions
        @Argument(help: "The app's id (bgctl apps lists them).", transform: parseAppID) var app: AppID
        @Argument(help: "The JSON payload file, e.g. {\"aps\":{\"content-available\":1}}.") var payload: String
        @Option(help: "The provider's .p8 private key.") var key: String
        @Option(help: "Its 10-character Key ID.") var keyID: String
        @Option(help: "The 10-character Team ID.") var teamID: String
        @Option(help: "The device token (default: the app's).") var token: String?
        @Option(help: "The gateway (default: bgd's own, as bgctl status says).") var gateway: String?
        @Option(help: "The certificate to trust (default: the one bgd made in its state directory).") var certificate:
            String?
        @Option(help: "apns-push-type.") var pushType: String = "background"
        @Option(parsing: .unconditional, help: "apns-priority (default: 5 for background, 10 otherwise).") var priority: Int?
        @Option(help: "apns-collapse-id.") var collapseID: String?
        @Option(
            help: "How long to wait for the gateway's answer, e.g. 30s.",
            transform: { text in
                guard let duration = Duration(parsingHuman: text), duration > .zero else {
                    throw ValidationError("'\(text)' is not a duration; write it like 30s, 2m or 500ms")
                }
                return duration
            })
        var timeout: Duration = .seconds(30)

        /// The ids as APNs has them (10 letters or digits), checked as `push keys add` checks
        /// them: a usage error, before any key file is read.
        func validate() throws {
            let ids = ProviderKeyRegistration(keyID: keyID, teamID: teamID, topics: [app.rawValue], publicKeyPEM: "")
            if let problem = ids.problem { throw ValidationError(problem) }
            if let gateway, let problem = ServerURL.problem(with: gateway) {
                throw ValidationError("--gateway '\(gateway)' \(problem)")
            }
            // It goes into the request's path: anything but hex digits made a URL that could not
            // be sent, told as "cannot reach the push gateway".
            if let token, !HexDigits.matches(token, length: 1...200) {
                throw ValidationError(
                    "--token is a device token, hexadecimal digits (bgctl push token APP shows the app's), not '\(token.prefix(80))'")
            }
        }

        func run() async throws {
            let body = options.input { () throws(InputFileProblem) in try InputFile.contents(payload) }
            let signingKey = options.input { () throws(InputFileProblem) in try ProviderSigningKey.load(key) }
            let deviceToken: String
            if let token {
                deviceToken = token
            } else {
                // The app's own token, as it has registered it: sending makes none (an app that
                // never registered for pushes, or was registered anew, has none to send to).
                deviceToken = try await options.call {
                    try await $0.send(.get, "/v1/apps/\(app)/push/token", as: DeviceTokenInfo.self)
                }.token
            }
            var status: DaemonStatus?
            func daemonStatus() async throws -> DaemonStatus {
                if let status { return status }
                let fetched = try await options.call { try await $0.send(.get, "/v1/status", as: DaemonStatus.self) }
                status = fetched
                return fetched
            }
            let gatewayURL: String?
            // "https://host:2197/" names the same gateway: its path is /3/device/…, not //3/device/….
            if let gateway {
                gatewayURL = gateway.hasSuffix("/") ? String(gateway.dropLast()) : gateway
            } else {
                gatewayURL = try await daemonStatus().pushGateway
            }
            guard let gateway = gatewayURL else {
                options.fail(
                    "pushGatewayOff", "bgd's push gateway is off (bgd --push-port off); start bgd with it, or give --gateway URL",
                    exit: BGCtlExit.refused)
            }
            // A plaintext gateway (bgd --push-plaintext or --push-http1) needs no certificate; a TLS one, the one given
            // or bgd's own — read here so a missing one is said to be missing, not a TLS failure.
            var trusted: String?
            if !gateway.hasPrefix("http://") {
                let path: String
                if let certificate { path = certificate } else { path = try await daemonStatus().stateDirectory + "/push-gateway.crt" }
                _ = options.input { () throws(InputFileProblem) in try InputFile.contents(path) }
                trusted = path
            }
            let jwt = try ProviderJWT.cached(keyID: keyID, teamID: teamID, key: signingKey, now: SystemClock().now)
            var headers = [
                ("authorization", "bearer \(jwt)"), ("apns-topic", app.rawValue), ("apns-push-type", pushType),
                ("apns-priority", String(priority ?? (pushType == "background" ? 5 : 10))),
            ]
            if let collapseID { headers.append(("apns-collapse-id", collapseID)) }
            let answer: PushAnswer
            do {
                answer = try await PushAnswer.post(
                    url: gateway + "/3/device/\(deviceToken)", headers: headers, body: body, trusting: trusted,
                    timeout: timeout)
            } catch {
                options.fail(
                    "gatewayUnreachable", GatewayConnectionFailure.describe(error, gateway: gateway),
                    exit: BGCtlExit.unreachable)
            }
            // Under --json too a refusal is a failure: `{"error", "reason"}` on stderr and the
            // status for its cause, so a script sees a 403 or 410 (it exited 0 before).
            if answer.status == 200, options.json { return try options.printJSON(answer) }
            guard answer.status == 200 else {
                if ProviderJWT.refusesTheToken(answer.reason) {
                    ProviderJWT.forget(keyID: keyID, teamID: teamID, key: signingKey)
                }
                let status: Int32 =
                    switch answer.status {
                    case 400, 413: BGCtlExit.badRequest
                    case 403: BGCtlExit.permission
                    case 404, 410: BGCtlExit.notFound
                    case 429, 503: BGCtlExit.refused
                    default: BGCtlExit.failure
                    }
                let said = "\(answer.status) \(answer.reason ?? "")"
                options.fail(
                    answer.reason ?? "\(answer.status)",
                    PushRefusalHint.hint(for: answer.reason).map { "\(said): \($0)" } ?? said, exit: status)
            }
            print(
                "200 accepted over \(answer.httpVersion) (apns-id \(answer.apnsID ?? "-")); bgctl push log \(app) shows what becomes of it"
            )
        }
    }
}

extension BGCtl.Push {
    /// Prints a provider token, for tools that send pushes themselves (curl, h2load).
    struct Jwt: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "jwt",
            abstract:
                "Print an ES256 provider token signed with a .p8 key: the one bgctl push send uses, made anew every 40 minutes (a token is valid for an hour from when it was made).")
        @Option(help: "The provider's .p8 private key.") var key: String
        @Option(help: "Its 10-character Key ID.") var keyID: String
        @Option(help: "The 10-character Team ID.") var teamID: String

        func validate() throws {
            let ids = ProviderKeyRegistration(keyID: keyID, teamID: teamID, topics: ["com.example.any"], publicKeyPEM: "")
            if let problem = ids.problem { throw ValidationError(problem) }
        }

        func run() async throws {
            let signingKey = inputOrFail(json: false) { () throws(InputFileProblem) in try ProviderSigningKey.load(key) }
            print(try ProviderJWT.cached(keyID: keyID, teamID: teamID, key: signingKey, now: SystemClock().now))
        }
    }
}
