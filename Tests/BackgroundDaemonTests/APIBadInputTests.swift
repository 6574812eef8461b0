import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundStore
import BackgroundTesting
import BackgroundTransfers
import Foundation
import GRDB
import NIOHTTP1
import Testing

/// Every entry point answers hostile or malformed input with a clear error — and changes nothing.
@Suite(.timeLimit(.minutes(5)))
struct APIBadInputTests {
    /// What a bad request must leave untouched.
    struct Snapshot: Equatable {
        var apps: [AppSummary]
        var runs: [[RunRecord]]
    }

    func snapshot(_ daemon: TestDaemon) async throws -> Snapshot {
        let apps = try await daemon.admin.send(.get, "/v1/apps", as: [AppSummary].self)
        var runs: [[RunRecord]] = []
        for app in apps {
            runs.append(try await daemon.admin.send(.get, "/v1/apps/\(app.id)/history", as: [RunRecord].self))
        }
        // isConnected and plans may move on their own; compare what requests could change.
        return Snapshot(
            apps: apps.map {
                var app = $0
                app.nextWake = nil
                app.nextWakeReasons = []
                app.isConnected = false
                return app
            }, runs: runs)
    }

    @Test func badRequestsGetClearErrorsAndChangeNothing() async throws {
        try await TestDaemon.with { daemon in
            let a = try await daemon.register("com.example.a", command: ["/bin/false"], interval: .never)
            let b = try await daemon.register("com.example.b", command: ["/bin/false"], interval: .never)
            // A's run in flight, sent to A's foreground stream (kept open by A's token).
            let socket = daemon.socketPath
            let client = DaemonClient(socketPath: socket, token: a.token)
            let stream = try await client.stream("/v1/app/events")
            var messages = stream.makeAsyncIterator()
            _ = try await messages.next()
            let run = try await daemon.admin.send(.post, "/v1/apps/com.example.a/fetch", as: RunRecord.self)
            let before = try await snapshot(daemon)

            let huge =
                Data(#"{"id":"com.example.big","launchCommand":["/bin/true"],"pad":""#.utf8)
                + Data(repeating: 0x61, count: 100_000) + Data(#""}"#.utf8)
            let cases: [(HTTPMethod, String, Data?, String?, Int, String)] = [
                (.GET, "/v1/apps/com.example.nope", nil, nil, 404, "unknownApp"),
                (.POST, "/v1/apps/com.example.nope/fetch", nil, nil, 404, "unknownApp"),
                (.DELETE, "/v1/apps/com.example.nope", nil, nil, 404, "unknownApp"),
                (.GET, "/v1/apps/com.example.nope/usage", nil, nil, 404, "unknownApp"),
                (.DELETE, "/v1/apps/com.example.nope/usage", nil, nil, 404, "unknownApp"),
                (.GET, "/v1/apps/not..valid/why", nil, nil, 400, "invalidAppID"),
                (.GET, "/v1/apps/com.example.a/history?limit=0", nil, nil, 400, "invalidQuery"),
                (.GET, "/v1/apps/com.example.a/history?limit=abc", nil, nil, 400, "invalidQuery"),
                (.GET, "/v1/runs/-1", nil, nil, 400, "invalidRunID"),
                (.GET, "/v1/nothing-here", nil, nil, 404, "notFound"),
                (.POST, "/v1/apps", Data("{".utf8), nil, 400, "malformedRequest"),
                (
                    .POST, "/v1/apps", Data(#"{"id":"com.example.c","launchCommand":"/bin/true"}"#.utf8), nil, 400,
                    "malformedRequest"
                ),
                (
                    .POST, "/v1/apps", Data(#"{"id":"../../etc","launchCommand":["/bin/true"]}"#.utf8), nil, 400,
                    "malformedRequest"
                ),
                (
                    .POST, "/v1/apps", Data(#"{"id":"com.example.c","launchCommand":[]}"#.utf8), nil, 400,
                    "malformedRequest"
                ),
                (
                    .POST, "/v1/apps",
                    Data(#"{"id":"com.example.c","launchCommand":["/bin/true"],"fetchInterval":"-5m"}"#.utf8), nil, 400,
                    "malformedRequest"
                ),
                (
                    .POST, "/v1/apps",
                    Data(#"{"id":"com.example.c","launchCommand":["/bin/true"],"fetchInterval":0}"#.utf8), nil, 400,
                    "malformedRequest"
                ),
                (
                    .POST, "/v1/apps", Data(#"{"id":"com.example.c","launchCommand":["./no/such/program"]}"#.utf8), nil,
                    400, "launchCommandNotFound"
                ),
                (
                    .POST, "/v1/apps", Data(#"{"id":"com.example.a","launchCommand":["/bin/true"]}"#.utf8), nil, 409,
                    "appAlreadyRegistered"
                ),
                (.POST, "/v1/apps", huge, nil, 413, "bodyTooLarge"),
                (
                    .PUT, "/v1/apps/com.example.a/fetch-interval", Data(#"{"interval":"soon"}"#.utf8), nil, 400,
                    "malformedRequest"
                ),
                (.GET, "/v1/app/events", nil, nil, 401, "unauthorized"),
                (.GET, "/v1/app/events", nil, "not-a-token", 401, "unauthorized"),
                (.POST, "/v1/app/opens", nil, String(repeating: "x", count: 10_000), 401, "unauthorized"),
                (.PUT, "/v1/app/fetch-interval", Data(#"{"interval":"31d"}"#.utf8), a.token, 400, "malformedRequest"),
                (
                    .POST, "/v1/app/runs/\(run.id)/result", Data(#"{"result":"maybe"}"#.utf8), a.token, 400,
                    "malformedRequest"
                ),
                (
                    .POST, "/v1/app/runs/\(run.id)/result", Data(#"{"result":"newData"}"#.utf8), b.token, 404,
                    "unknownRun"
                ),
                (.POST, "/v1/app/runs/999/result", Data(#"{"result":"newData"}"#.utf8), a.token, 404, "unknownRun"),
                (.POST, "/v1/app/events/ack", Data(#"{"seq":1}"#.utf8), b.token, 400, "invalidSequence"),
                // Foundation calls a number that does not fit "not valid JSON": said as what it is.
                (.POST, "/v1/app/events/ack", Data(#"{"seq":1.5}"#.utf8), a.token, 400, "malformedRequest"),
                // Task identifiers no request could name are refused at registration, not stored.
                (
                    .POST, "/v1/apps",
                    Data(#"{"id":"com.example.c","launchCommand":["/bin/true"],"taskIdentifiers":["a b"]}"#.utf8), nil,
                    400, "malformedRequest"
                ),
                (
                    .PUT, "/v1/apps/com.example.a",
                    Data(#"{"id":"com.example.a","launchCommand":["/bin/true"],"taskIdentifiers":[""]}"#.utf8), nil,
                    400, "malformedRequest"
                ),
                // A transfer NIO could not connect to (it trapped bgd, at every start while stored)
                // and a timeout no Duration holds (it trapped the decoder).
                (
                    .POST, "/v1/app/transfers", Data(#"{"session":"s","url":"http://127.0.0.1:99999/x"}"#.utf8),
                    a.token, 400, "invalidTransfer"
                ),
                (
                    .POST, "/v1/transfers",
                    Data(#"{"session":"s","url":"http://[::1]:0/x","destination":"/tmp/x"}"#.utf8),
                    nil, 400, "invalidTransfer"
                ),
                (
                    .POST, "/v1/app/transfers",
                    Data(#"{"session":"s","url":"http://127.0.0.1:8/x","timeoutForResource":1e300}"#.utf8), a.token,
                    400, "malformedRequest"
                ),
                (
                    .POST, "/v1/app/transfers",
                    Data(#"{"session":"s","url":"http://127.0.0.1:8/x","timeoutForResource":1e12}"#.utf8), a.token,
                    400, "invalidTransfer"
                ),
                (.DELETE, "/v1/app/task-requests/bad%20identifier", nil, a.token, 400, "invalidTaskIdentifier"),
                // Dates past 9999 cannot be read back from the store (a task request's trapped bgd
                // at every start; a transfer's stalled every transfer).
                (
                    .POST, "/v1/app/task-requests",
                    Data(
                        #"{"identifier":"t","kind":"processing","earliestBeginDate":"10000-01-01T00:00:00Z","requiresNetworkConnectivity":false,"requiresExternalPower":false}"#
                            .utf8),
                    a.token, 400, "malformedRequest"
                ),
                (
                    .POST, "/v1/app/transfers",
                    Data(
                        #"{"session":"s","url":"http://127.0.0.1:8/x","earliestBegin":"9999-12-31T23:59:59.9999Z"}"#
                            .utf8),
                    a.token, 400, "malformedRequest"
                ),
                // Names bgctl prints back to a terminal hold no control characters (an escape
                // sequence ran in the operator's terminal); a checksum is ASCII hex, not fullwidth.
                (
                    .POST, "/v1/app/background-tasks", Data(#"{"name":"\u001b]2;owned\u0007\nfake row"}"#.utf8),
                    a.token, 400, "invalidTaskName"
                ),
                (.POST, "/v1/app/background-tasks", Data(#"{"id":0}"#.utf8), a.token, 400, "invalidTaskID"),
                (
                    .POST, "/v1/app/transfers", Data(#"{"session":"s\u001b[2J","url":"http://127.0.0.1:8/x"}"#.utf8),
                    a.token, 400, "invalidTransfer"
                ),
                (
                    .POST, "/v1/app/transfers",
                    Data(
                        #"{"session":"s","url":"http://127.0.0.1:8/x","sha256":"\#(String(repeating: "\u{FF41}", count: 64))"}"#
                            .utf8), a.token, 400, "invalidTransfer"
                ),
            ]
            for (method, path, body, token, status, code) in cases {
                let answer = try await RawHTTP.request(socket, method, path, body: body, token: token)
                #expect(answer.status == status, "\(method) \(path): \(String(decoding: answer.body, as: UTF8.self))")
                #expect(answer.errorCode == code, "\(method) \(path)")
                #expect(!(answer.json["reason"] as? String ?? "").isEmpty, "every error says what to do")
            }
            // A chunk size that is not one: NIO's parser refuses the body the handler reads.
            let chunked = try await Command.run(
                "/usr/bin/python3",
                [
                    "-c",
                    #"""
                    import socket, sys
                    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
                    s.sendall(('POST /v1/apps HTTP/1.1\r\nHost: bgd\r\nAuthorization: Bearer %s\r\n'
                               'Transfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFF\r\nab\r\n' % sys.argv[2]).encode())
                    print(s.recv(4096).decode(errors='replace'))
                    """#, socket, DaemonClient.operatorToken(socketPath: socket) ?? "",
                ])
            #expect(chunked.standardOutput.hasPrefix("HTTP/1.1 400"), "\(chunked)")
            #expect(chunked.standardOutput.contains("malformedRequest"), "\(chunked)")

            #expect(try await snapshot(daemon) == before)
            #expect(try await daemon.admin.send(.get, "/v1/transfers", as: [TransferRecord].self).isEmpty)
            #expect(try await daemon.store.run(run.id)?.outcome == nil, "A's run is still in flight, untouched by B")
        }
    }

    /// What one app may hold of bgd: 4 event streams (an app opening them without end, unread,
    /// exhausted bgd's descriptors and memory) and 1,000 transfers not ended (each costs every
    /// planning pass). Past either, 429 with what to do, and nothing changes.
    @Test func anAppHoldsABoundedShareOfBgd() async throws {
        try await TestDaemon.with { daemon in
            let app = try await daemon.register("com.example.a", command: ["/bin/false"], interval: .never)
            // Kept to the end.
            let streams = try await holdEveryStream(ofAppWithToken: app.token, on: daemon)
            // The fifth on a connection of its own (the helper's client pool holds the four).
            let fifth = try await Command.run(
                "/usr/bin/python3",
                [
                    "-c",
                    #"""
                    import socket, sys
                    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
                    s.sendall(('GET /v1/app/events HTTP/1.1\r\nHost: bgd\r\nAuthorization: Bearer %s\r\n\r\n' % sys.argv[2]).encode())
                    print(s.recv(4096).decode(errors='replace'))
                    """#, daemon.socketPath, app.token,
                ])
            #expect(fifth.standardOutput.hasPrefix("HTTP/1.1 429"), "\(fifth)")
            #expect(fifth.standardOutput.contains(#""error":"tooManyStreams""#), "\(fifth)")
            // Another app's share is its own.
            let other = try await daemon.register("com.example.b", command: ["/bin/false"], interval: .never)
            let itsStream = try await DaemonClient(socketPath: daemon.socketPath, token: other.token).stream(
                "/v1/app/events")
            var itsMessages = itsStream.makeAsyncIterator()
            #expect(try await itsMessages.next() != nil)

            // Transfers: 999 waiting (made in the store: through the API each would cost a
            // planning pass), the 1,000th through the API, then one more is refused.
            let later = daemon.clock.now.addingTimeInterval(365 * 86400)
            for n in 0..<999 {
                var request = TransferRequest(session: "s", url: URL(string: "http://127.0.0.1:9/\(n)")!)
                request.earliestBegin = later
                _ = try await daemon.store.createTransfer(request, app: app.app.id, now: daemon.clock.now) { id in
                    (daemon.directory + "/\(id).partial", daemon.directory + "/\(id)")
                }
            }
            let thousandth = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers",
                body: Data(
                    #"{"session":"s","url":"http://127.0.0.1:9/y","earliestBegin":"\#(WireCoding.format(later))"}"#.utf8
                ),
                token: app.token)
            #expect(thousandth.status == 201, "\(thousandth)")
            let refused = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers",
                body: Data(#"{"session":"s","url":"http://127.0.0.1:9/x"}"#.utf8), token: app.token)
            #expect(refused.status == 429 && refused.errorCode == "tooManyTransfers", "\(refused)")
            #expect(try await daemon.store.outstandingTransferCount(of: app.app.id) == 1000)
            withExtendedLifetime(streams) {}
        }
    }

    /// An app that never acknowledges its events cannot grow bgd by transfers: each ended one
    /// leaves it events (and keeps the transfer's row) until it acknowledges them.
    @Test func anAppThatLeavesItsEventsUnacknowledgedStartsNoMoreTransfers() async throws {
        try await TestDaemon.with { daemon in
            let app = try await daemon.register("com.example.a", command: ["/bin/false"], interval: .never)
            // 5,000 ended transfers, two events each (made in the store: through the API each
            // would be a download and a launch).
            for n in 0..<5000 {
                let request = TransferRequest(session: "s\(n)", url: URL(string: "http://127.0.0.1:9/\(n)")!)
                let created = try await daemon.store.createTransfer(request, app: app.app.id, now: daemon.clock.now) {
                    id in (daemon.directory + "/\(id).partial", daemon.directory + "/\(id)")
                }
                _ = try await daemon.store.finishTransfer(created.record.id, .cancelled, now: daemon.clock.now)
            }
            #expect(try await daemon.store.openEventCount(for: app.app.id) == 10_000)
            let body = Data(
                #"{"session":"s","url":"http://127.0.0.1:9/x","earliestBegin":"2100-01-01T00:00:00Z"}"#.utf8)
            let refused = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers", body: body, token: app.token)
            #expect(refused.status == 429 && refused.errorCode == "tooManyUnacknowledgedEvents", "\(refused)")
            #expect(String(decoding: refused.body, as: UTF8.self).contains("acknowledge"), "says what to do")
            #expect(try await daemon.store.outstandingTransferCount(of: app.app.id) == 0, "nothing was made")

            // Acknowledged, the app may go on.
            let last = try await daemon.store.lastEventSequence(for: app.app.id)
            let ack = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/events/ack", body: Data(#"{"seq":\#(last.rawValue)}"#.utf8),
                token: app.token)
            #expect(ack.status < 300, "\(ack)")
            let accepted = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers", body: body, token: app.token)
            #expect(accepted.status == 201, "\(accepted)")
        }
    }

    @Test func aSecondDaemonOnTheSameStateIsRefused() async throws {
        try await TestDaemon.with { daemon in
            await #expect(throws: StateDirectory.AlreadyInUse.self) {
                _ = try await Daemon(
                    configuration: .init(
                        stateDirectory: daemon.directory + "/state", socketPath: daemon.directory + "/second.sock"))
            }
            // The first one is unharmed.
            let status = try await daemon.admin.send(.get, "/v1/status", as: DaemonStatus.self)
            #expect(status.appCount == 0)
        }
    }

    /// A state file that is not a database (overwritten, not bgd's): bgd says which file and what
    /// to do, exits 78 (starting again will not mend it), and leaves the file as it was.
    @Test func aStateFileThatIsNotADatabaseIsSaidSo() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory + "/state", withIntermediateDirectories: true)
        let file = directory + "/state/bgd.sqlite"
        let junk = String(repeating: "not a database\n", count: 400)
        try junk.write(toFile: file, atomically: true, encoding: .utf8)
        let refused = try await Command.bgd(onStateIn: directory)
        #expect(refused.status == 78, "\(refused.standardError)")
        #expect(
            refused.standardError.contains("\(file) is not a database SQLite can read")
                && refused.standardError.contains("move it"), "\(refused.standardError)")
        #expect(try String(contentsOfFile: file, encoding: .utf8) == junk, "the file is left as it was")
    }

    /// A state file a newer bgd wrote (an upgrade rolled back): this bgd says so, exits 78, and
    /// writes nothing in it. Before, it opened it and wrote by its older rules, and the newer
    /// bgd, run again, took its one-time mends for done.
    @Test func aStoreANewerBgdWroteIsRefused() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory + "/state", withIntermediateDirectories: true)
        let file = directory + "/state/bgd.sqlite"
        _ = try BackgroundStore.open(atPath: file, durability: .normal)
        let database = try DatabaseQueue(path: file)
        try await database.write { db in
            try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('fromTheFuture')")
        }
        try database.close()
        let refused = try await Command.bgd(onStateIn: directory)
        #expect(refused.status == 78, "\(refused.standardError)")
        #expect(
            refused.standardError.contains("written by a newer bgd") && refused.standardError.contains("fromTheFuture"),
            "\(refused.standardError)")
    }
}

/// The API's error codes are one closed list the library shares: every refusal a lower layer
/// names has its case, and each case is its own wire name.
struct APIErrorCodeTests {
    @Test func everyFileRefusalHasItsCode() {
        for code in SafeFiles.Refusal.Code.allCases {
            #expect(APIErrorCode(rawValue: code.rawValue) != nil, "\(code) has no APIErrorCode")
        }
        for error in [TaskSchedulerError.unavailable, .tooManyPendingTaskRequests, .notPermitted] {
            #expect(APIErrorCode(rawValue: error.rawValue) != nil, "\(error) has no APIErrorCode")
        }
        #expect(Set(APIErrorCode.allCases.map(\.rawValue)).count == APIErrorCode.allCases.count)
    }
}
