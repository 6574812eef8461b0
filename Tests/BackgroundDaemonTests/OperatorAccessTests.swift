import Background
import BackgroundModel
import BackgroundTesting
import Foundation
import NIOHTTP1
import Testing

/// Operator endpoints need the operator's token; an app's token, or a process bgd launched
/// (whatever it sends), is refused every one of them and changes nothing (probe D4).
@Suite(.timeLimit(.minutes(5)))
struct OperatorAccessTests {
    @Test func anAppsTokenReachesOnlyItsOwnEndpoints() async throws {
        try await TestDaemon.with { daemon in
            let mine = try await daemon.register("com.example.mine", command: ["/bin/true"], interval: .never)
            _ = try await daemon.register("com.example.other", command: ["/bin/true"], interval: .never)
            let attempts: [(HTTPMethodName, String, String?)] = [
                (.GET, "/v1/apps", nil),
                (.GET, "/v1/apps/com.example.other/events", nil),
                (.POST, "/v1/apps/com.example.other/push/token", nil),
                (.PUT, "/v1/apps/com.example.other/fetch-interval", #"{"interval":"minimum"}"#),
                (.DELETE, "/v1/apps/com.example.other", nil),
                (
                    .POST, "/v1/push/keys",
                    #"{"keyID":"ABC123DEFG","teamID":"TEAM123456","topics":["com.example.other"],"publicKeyPEM":"x"}"#
                ),
                (.POST, "/v1/transfers", #"{"session":"s","url":"http://127.0.0.1:9/x","destination":"/tmp/x"}"#),
                (.GET, "/metrics", nil),
            ]
            for (method, path, body) in attempts {
                let answer = try await RawHTTP.request(
                    daemon.socketPath, method.nio, path, body: body.map { Data($0.utf8) }, token: mine.token)
                #expect(
                    answer.status == 403 && answer.errorCode == "operatorOnly",
                    "\(method) \(path): \(answer.status) \(answer.errorCode ?? "-")")
                let anonymous = try await RawHTTP.request(
                    daemon.socketPath, method.nio, path, body: body.map { Data($0.utf8) }, anonymous: true)
                #expect(
                    anonymous.status == 401 && anonymous.errorCode == "operatorCredentialRequired",
                    "\(method) \(path) without a token")
            }
            // Nothing changed: the other app is there, its interval and token untouched, no key, no transfer.
            let apps = try await daemon.admin.send(.get, "/v1/apps", as: [AppSummary].self)
            #expect(apps.map(\.id.rawValue).sorted() == ["com.example.mine", "com.example.other"])
            #expect(apps.first { $0.id.rawValue == "com.example.other" }?.fetchInterval == .never)
            #expect(try await daemon.admin.send(.get, "/v1/push/keys", as: [ProviderKeyRegistration].self).isEmpty)
            #expect(try await daemon.admin.send(.get, "/v1/transfers", as: [TransferRecord].self).isEmpty)
            #expect(try await daemon.store.activeDeviceToken(of: AppID(rawValue: "com.example.other")!) == nil)
            // Its own endpoints still work with it.
            #expect(try await RawHTTP.request(daemon.socketPath, .GET, "/v1/app", token: mine.token).status == 200)
        }
    }

    /// A process bgd launched is refused the operator's endpoints even with the operator's own
    /// token (read from the file beside the socket, which it can reach as the same user): the
    /// kernel names the caller.
    @Test func aLaunchedProcessIsNeverTheOperator() async throws {
        try await TestDaemon.with { daemon in
            let script = #"""
                curl -s --unix-socket "$BGD_SOCKET" -H "Authorization: Bearer $(cat "$BGD_SOCKET.operator-token")" \
                  -X DELETE http://bgd/v1/apps/com.example.victim > "$BGD_CONTAINER/answer"
                """#
            _ = try await daemon.register("com.example.victim", command: ["/bin/true"], interval: .never)
            _ = try await daemon.register("com.example.sneaky", command: ["/bin/sh", "-c", script], interval: .never)
            _ = try await daemon.waitForRunEnd(of: "com.example.sneaky") {
                _ = try await daemon.admin.send(.post, "/v1/apps/com.example.sneaky/fetch", as: RunRecord.self)
            }
            let answer = try String(
                contentsOfFile: daemon.directory + "/state/containers/com.example.sneaky/answer", encoding: .utf8)
            #expect(answer.contains(#""error":"operatorOnly""#), "\(answer)")
            #expect(
                try await daemon.admin.send(.get, "/v1/apps", as: [AppSummary].self).contains {
                    $0.id.rawValue == "com.example.victim"
                })
        }
    }
}

enum HTTPMethodName: String {
    case GET, POST, PUT, DELETE
    var nio: NIOHTTP1.HTTPMethod {
        switch self {
        case .GET: .GET
        case .POST: .POST
        case .PUT: .PUT
        case .DELETE: .DELETE
        }
    }
}
