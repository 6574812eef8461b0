import BackgroundModel
import BackgroundStore
import Foundation
import Hummingbird
import HummingbirdCore

/// The operator's endpoints about apps, runs, conditions and the daemon (bgctl). Each handler
/// reads the request, calls one service and writes its answer.
struct AdminRoutes {
    let info: DaemonInfo
    let apps: Apps
    let runs: Runs
    let events: AppEvents
    let conditions: ConditionsMonitor
    let metrics: DaemonMetrics
    let store: BackgroundStore
    /// The dashboard, when bgd serves one (`bgctl dashboard` asks it for a login link).
    let dashboard: DashboardAccess?
    let clock: any WallClock

    func add(to router: Router<APIRequestContext>) {
        let v1 = router.group("v1")
        v1.get("status") { _, _ in try JSONResponse.make(try await info.status()) }
        v1.get("apps") { _, _ in JSONResponse.make(encoded: try await apps.encodedSummaries()) }
        v1.post("apps") { request, _ in
            var request = request
            let registration = try await request.decodeJSON(RegisterAppRequest.self)
            return try JSONResponse.make(try await apps.register(registration), status: .created)
        }
        v1.get("apps/:id") { _, context in try JSONResponse.make(try await apps.summary(of: try context.appID())) }
        v1.put("apps/:id") { request, context in
            var request = request
            let registration = try await request.decodeJSON(RegisterAppRequest.self)
            guard registration.id == (try context.appID()) else {
                throw APIError(.badRequest, .invalidAppID, "the body's id is not the app in the path")
            }
            return try JSONResponse.make(try await apps.replace(registration))
        }
        v1.get("apps/:id/token") { _, context in
            let id = try context.appID()
            return try JSONResponse.make(AppTokenAnswer(app: id, token: try await apps.token(of: id)))
        }
        v1.post("apps/:id/token") { _, context in
            let id = try context.appID()
            return try JSONResponse.make(AppTokenAnswer(app: id, token: try await apps.rotateToken(of: id)))
        }
        v1.delete("apps/:id") { _, context in
            try await apps.unregister(try context.appID())
            return Response(status: .noContent)
        }
        v1.get("apps/:id/history") { request, context in
            let limit = try request.uri.integerQuery("limit", default: 20, range: 1...1000)
            return try JSONResponse.make(try await runs.history(of: try context.appID(), limit: limit))
        }
        v1.get("apps/:id/events") { request, context in
            let limit = try request.uri.integerQuery("limit", default: 100, range: 1...10_000)
            return try JSONResponse.make(try await events.outbox(of: try context.appID(), limit: limit))
        }
        v1.get("apps/:id/usage") { _, context in
            try JSONResponse.make(try await apps.usageSummary(of: try context.appID()))
        }
        v1.delete("apps/:id/usage") { _, context in
            try await apps.forgetUsage(of: try context.appID())
            return Response(status: .noContent)
        }
        v1.get("apps/:id/why") { _, context in try JSONResponse.make(try await runs.why(try context.appID())) }
        v1.get("apps/:id/forecast") { request, context in
            let hours = try request.uri.integerQuery("hours", default: 24, range: 1...168)
            return try JSONResponse.make(try await runs.forecast(try context.appID(), hours: hours))
        }
        v1.post("apps/:id/fetch") { request, context in
            let wait = try request.uri.waitQuery()
            // Started whether or not the client stays for its end.
            let started = try await runs.simulateFetch(try context.appID())
            guard let wait else { return try JSONResponse.make(started, status: .accepted) }
            return try await LongPoll.answer(request, waiting: wait) {
                try JSONResponse.make(try await runs.run(started.id, waitingUpTo: wait))
            }
        }
        v1.post("apps/:id/opens") { _, context in
            try await apps.recordOpen(of: try context.appID())
            return Response(status: .noContent)
        }
        v1.put("apps/:id/fetch-interval") { request, context in
            var request = request
            let update = try await request.decodeJSON(FetchIntervalUpdate.self)
            return try JSONResponse.make(try await runs.setFetchInterval(update.interval, for: try context.appID()))
        }
        v1.get("runs/:run") { request, context in
            let (wait, run) = (try request.uri.waitQuery() ?? .zero, try context.parameters.runID())
            return try await LongPoll.answer(request, waiting: wait) {
                try JSONResponse.make(try await runs.run(run, waitingUpTo: wait))
            }
        }
        v1.get("env") { _, _ in try JSONResponse.make(await conditions.report) }
        v1.put("env") { request, _ in
            var request = request
            let overrides = try await request.decodeJSON(ConditionOverrides.self)
            if let problem = overrides.problem { throw APIError(.badRequest, .invalidConditions, problem) }
            try await conditions.setOverrides(overrides)
            return try JSONResponse.make(await conditions.report)
        }
        v1.delete("env") { _, _ in
            try await conditions.setOverrides(ConditionOverrides())
            return try JSONResponse.make(await conditions.report)
        }
        v1.post("dashboard/login") { _, _ in
            guard let dashboard else { throw ServiceError.dashboardOff }
            return try JSONResponse.make(await dashboard.login(now: clock.now))
        }
        router.get("metrics") { _, _ in await metrics.response(store: store) }
    }
}

extension URI {
    func integerQuery(_ name: String, default value: Int, range: ClosedRange<Int>) throws -> Int {
        guard let raw = queryParameters[name[...]] else { return value }
        guard let number = Int(raw), range.contains(number) else {
            throw APIError(
                .badRequest, .invalidQuery,
                "'\(name)' must be an integer from \(range.lowerBound) to \(range.upperBound)")
        }
        return number
    }

    /// `?wait=SECONDS` (0 to 600): how long to wait for a run to end.
    func waitQuery() throws -> Duration? {
        guard queryParameters["wait"] != nil else { return nil }
        return .seconds(try integerQuery("wait", default: 0, range: 0...600))
    }
}
