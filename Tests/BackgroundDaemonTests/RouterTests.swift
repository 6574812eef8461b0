import BackgroundDaemon
import BackgroundModel
import Foundation
import HTTPTypes
import Testing

/// The `/v1/` API through its router alone (no socket, no server): each use case answers from
/// its service, every refusal in the API's one error shape, and a refusal changes nothing.
struct RouterTests {
    @Test func anAppIsRegisteredShownAndUnregisteredThroughItsServices() async throws {
        try await RouterHarness.with { api in
            let token = try await api.register("com.example.a")
            #expect(
                try await api.call(.get, "/v1/apps/com.example.a").decode(AppSummary.self).id.rawValue
                    == "com.example.a")
            // The app's own endpoint, by its token (the authentication middleware names the caller).
            #expect(
                try await api.call(.get, "/v1/app", as: .app(token)).decode(AppSummary.self).id.rawValue
                    == "com.example.a")
            let summary = try await api.call(
                .put, "/v1/app/fetch-interval", as: .app(token),
                json: FetchIntervalUpdate(interval: .every(.seconds(3600))))
            #expect(try summary.decode(AppSummary.self).fetchInterval == .every(.seconds(3600)))
            // The answer's next wake is planned for the interval just set, not read from the
            // scheduler's pass before the change (which named the old interval's reasons).
            let off = try await api.call(
                .put, "/v1/apps/com.example.a/fetch-interval", json: FetchIntervalUpdate(interval: .never))
            let offReasons = try off.decode(AppSummary.self).nextWakeReasons.map(\.code)
            #expect(offReasons.contains(.fetchDisabled), "\(offReasons)")
            let on = try await api.call(
                .put, "/v1/app/fetch-interval", as: .app(token), json: FetchIntervalUpdate(interval: .minimum))
            let onReasons = try on.decode(AppSummary.self).nextWakeReasons.map(\.code)
            #expect(!onReasons.isEmpty && !onReasons.contains(.fetchDisabled), "\(onReasons)")
            #expect(try await api.call(.delete, "/v1/apps/com.example.a").status == .noContent)
            let gone = try await api.call(.get, "/v1/apps/com.example.a")
            #expect(gone.status == .notFound)
            #expect(gone.errorCode == "unknownApp")
            // Its token died with it.
            #expect(try await api.call(.get, "/v1/app", as: .app(token)).status == .unauthorized)
        }
    }

    /// Every domain refusal, mapped in one place (`APIError.from`): a status, a stable code.
    @Test func everyRefusalHasItsStatusAndCodeAndChangesNothing() async throws {
        try await RouterHarness.with { api in
            let token = try await api.register("com.example.a", taskIdentifiers: ["com.example.a.work"])
            let before = try await api.call(.get, "/v1/apps").body
            let cases: [(HTTPRequest.Method, String, RouterHarness.Caller, (any Encodable & Sendable)?, Int, String)] =
                [
                    (.get, "/v1/apps/com.example.none", .operator, nil, 404, "unknownApp"),
                    (
                        .post, "/v1/apps", .operator,
                        RegisterAppRequest(
                            id: AppID(rawValue: "com.example.b")!, launchCommand: LaunchCommand(["/no/such/program"])!),
                        400, "launchCommandNotFound"
                    ),
                    (
                        .post, "/v1/apps", .operator,
                        RegisterAppRequest(
                            id: AppID(rawValue: "com.example.a")!, launchCommand: LaunchCommand(["/bin/true"])!),
                        409, "appAlreadyRegistered"
                    ),
                    (.get, "/v1/apps/com.example.a/push/token", .operator, nil, 404, "noDeviceToken"),
                    (.delete, "/v1/push/keys/NOKEY", .operator, nil, 404, "unknownProviderKey"),
                    (.get, "/v1/push/relay", .app(token), nil, 403, "operatorOnly"),
                    (
                        .post, "/v1/push/relay", .app(token), PushRelayEnrollRequest(url: "https://localhost:1"), 403,
                        "operatorOnly"
                    ),
                    (.post, "/v1/push/relay", .operator, PushRelayEnrollRequest(url: "ftp://relay"), 400, "invalidRelayURL"),
                    (
                        .post, "/v1/tasks/expire", .operator,
                        TaskTarget(app: AppID(rawValue: "com.example.a")!, identifier: "com.example.a.work"), 404,
                        "taskNotRunning"
                    ),
                    (
                        .post, "/v1/tasks/run", .operator,
                        TaskTarget(app: AppID(rawValue: "com.example.a")!, identifier: "com.example.a.work"), 404,
                        "unknownTaskRequest"
                    ),
                    (.post, "/v1/dashboard/login", .operator, nil, 409, "dashboardOff"),
                    (.get, "/v1/transfers/99", .operator, nil, 404, "unknownTransfer"),
                    (.get, "/v1/runs/99", .operator, nil, 404, "unknownRun"),
                    (.get, "/v1/apps/com.example.a/history?limit=0", .operator, nil, 400, "invalidQuery"),
                    (
                        .post, "/v1/app/events/ack", .app(token), EventAcknowledgement(seq: EventSequence(5)), 400,
                        "invalidSequence"
                    ),
                    (
                        .post, "/v1/app/transfers", .app(token),
                        TransferRequest(session: "s", url: URL(string: "http://127.0.0.1/f")!, destination: "/tmp/x"),
                        400,
                        "destinationNotAllowed"
                    ),
                    (
                        .post, "/v1/transfers", .operator,
                        TransferRequest(session: "s", url: URL(string: "http://127.0.0.1/f")!),
                        400, "destinationRequired"
                    ),
                    (.post, "/v1/app/transfers/1/resume", .app(token), nil, 404, "unknownTransfer"),
                    (.delete, "/v1/app/background-tasks/7", .app(token), nil, 404, "unknownBackgroundTask"),
                    (
                        .post, "/v1/app/task-requests", .app(token),
                        TaskRequest(identifier: "com.example.undeclared", kind: .processing), 403, "notPermitted"
                    ),
                    (.get, "/v1/app", .nobody, nil, 401, "unauthorized"),
                    (.get, "/v1/apps", .app(token), nil, 403, "operatorOnly"),
                    (.get, "/v1/nowhere", .operator, nil, 404, "notFound"),
                ]
            for (method, path, caller, body, status, code) in cases {
                let answer = try await api.call(method, path, as: caller, json: body.map(AnyEncodable.init))
                #expect(answer.status.code == status, "\(method) \(path)")
                #expect(answer.errorCode == code, "\(method) \(path)")
            }
            // Nothing the refusals touched changed.
            #expect(try await api.call(.get, "/v1/apps").body == before)
            #expect(try await api.call(.get, "/v1/transfers").decode([TransferRecord].self).isEmpty)
            #expect(
                try await api.call(.get, "/v1/app/task-requests", as: .app(token)).decode([PendingTaskRequest].self)
                    .isEmpty)
        }
    }

    /// Use cases ring their own doorbells and keep their own side effects: a task request
    /// submitted through the route is pending, and the operator's overview shows it.
    @Test func aTaskRequestSubmittedByTheAppIsWhatTheOperatorSees() async throws {
        try await RouterHarness.with { api in
            let token = try await api.register("com.example.a", taskIdentifiers: ["com.example.a.work"])
            let submitted = try await api.call(
                .post, "/v1/app/task-requests", as: .app(token),
                json: TaskRequest(identifier: "com.example.a.work", kind: .processing))
            #expect(submitted.status == .created)
            let overview = try await api.call(.get, "/v1/tasks").decode(TasksOverview.self)
            #expect(overview.pending.map(\.request.identifier) == ["com.example.a.work"])
            #expect(
                try await api.call(.delete, "/v1/app/task-requests/com.example.a.work", as: .app(token)).status
                    == .noContent)
            #expect(try await api.call(.get, "/v1/tasks").decode(TasksOverview.self).pending.isEmpty)
        }
    }

    /// `/metrics` is one handler, served on the socket (and the dashboard).
    @Test func metricsAreServedInPrometheusText() async throws {
        try await RouterHarness.with { api in
            let answer = try await api.call(.get, "/metrics")
            #expect(answer.status == .ok)
            #expect(String(buffer: answer.body).contains("bgd_outbox_depth"))
        }
    }
}

/// Any encodable value, so a table can hold request bodies of different types.
struct AnyEncodable: Encodable, Sendable {
    let value: any Encodable & Sendable
    init(_ value: any Encodable & Sendable) { self.value = value }
    func encode(to encoder: any Encoder) throws { try value.encode(to: encoder) }
}
