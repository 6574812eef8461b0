import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import Hummingbird
import HummingbirdCore

/// The operator's endpoints (bgctl, and later the dashboard). Anyone who can open the socket may
/// call them: the socket is 0600 in a 0700 directory, so that is the user who runs bgd.
struct AdminRoutes {
    let core: DaemonCore

    func add(to router: Router<APIRequestContext>) {
        let v1 = router.group("v1")
        v1.get("status") { _, _ in try await status() }
        v1.get("apps") { _, _ in JSONResponse.make(encoded: try await core.encodedSummaries()) }
        v1.post("apps") { request, _ in
            var request = request
            return try await register(try await request.decodeJSON(RegisterAppRequest.self))
        }
        v1.get("apps/:id") { _, context in
            try JSONResponse.make(try await core.summary(of: try await core.requireApp(try context.parameters.appID())))
        }
        v1.delete("apps/:id") { _, context in try await unregister(try context.parameters.appID()) }
        v1.get("apps/:id/history") { request, context in
            let id = try context.parameters.appID()
            _ = try await core.requireApp(id)
            let limit = try request.uri.integerQuery("limit", default: 20, range: 1...1000)
            return try JSONResponse.make(try await core.store.runs(of: id, limit: limit))
        }
        v1.get("apps/:id/events") { request, context in
            let id = try context.parameters.appID()
            _ = try await core.requireApp(id)
            let limit = try request.uri.integerQuery("limit", default: 100, range: 1...10_000)
            return try JSONResponse.make(try await core.store.outbox(for: id, limit: limit))
        }
        v1.get("apps/:id/usage") { _, context in
            let id = try context.parameters.appID()
            _ = try await core.requireApp(id)
            let opens = try await core.store.opens(of: id)
            let now = core.clock.now
            let model = UsageModel.learning(from: opens)
            return try JSONResponse.make(
                UsageSummary(
                    app: id, opensRecorded: opens.count, firstOpen: opens.first, lastOpen: opens.last,
                    opensPerDay: model.opensPerDay(now: now), sessionsPerDay: model.sessionsPerDay(now: now),
                    busiestSlots: model.busiestSlots(limit: 8, now: now).map {
                        UsageSummary.Slot(start: $0.start, sessionsPerDay: $0.sessionsPerDay)
                    }))
        }
        v1.delete("apps/:id/usage") { _, context in
            let id = try context.parameters.appID()
            try await core.store.forgetOpens(of: id)
            await core.usage.forget(id)
            core.schedulerDoorbell.ring()
            return Response(status: .noContent)
        }
        v1.post("dashboard/login") { _, _ in
            guard let dashboard = core.dashboard else {
                throw APIError(.conflict, .dashboardOff, "bgd serves no dashboard; start it with --http 127.0.0.1:8765")
            }
            let port = await dashboard.boundPort.wait()
            let host = dashboard.host.contains(":") ? "[\(dashboard.host)]" : dashboard.host
            let base = "http://\(host):\(port)"
            return try JSONResponse.make(
                DashboardLogin(url: base + "/login?code=" + dashboard.auth.issueCode(now: core.clock.now), base: base))
        }
        router.get("metrics") { _, _ in
            var headers = HTTPFields()
            headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
            return Response(
                status: .ok, headers: headers,
                body: .init(byteBuffer: ByteBuffer(string: await core.metrics.exposition(store: core.store))))
        }
        v1.get("apps/:id/why") { _, context in try await why(try context.parameters.appID()) }
        v1.get("apps/:id/forecast") { request, context in
            try await forecast(
                try context.parameters.appID(),
                hours: try request.uri.integerQuery("hours", default: 24, range: 1...168))
        }
        v1.post("apps/:id/fetch") { request, context in
            try await simulateFetch(try context.parameters.appID(), wait: try request.uri.waitQuery())
        }
        v1.post("apps/:id/opens") { _, context in
            try await core.recordOpen(of: try context.parameters.appID())
            return Response(status: .noContent)
        }
        v1.put("apps/:id/fetch-interval") { request, context in
            var request = request
            let id = try context.parameters.appID()
            let update = try await request.decodeJSON(FetchIntervalUpdate.self)
            try await core.store.setFetchInterval(update.interval, for: id)
            core.schedulerDoorbell.ring()
            return try JSONResponse.make(try await core.summary(of: try await core.requireApp(id)))
        }
        v1.get("env") { _, _ in try JSONResponse.make(await core.conditions.report) }
        v1.put("env") { request, _ in
            var request = request
            let overrides = try await request.decodeJSON(ConditionOverrides.self)
            if let problem = overrides.problem { throw APIError(.badRequest, .invalidConditions, problem) }
            try await core.conditions.setOverrides(overrides)
            return try JSONResponse.make(await core.conditions.report)
        }
        v1.delete("env") { _, _ in
            try await core.conditions.setOverrides(ConditionOverrides())
            return try JSONResponse.make(await core.conditions.report)
        }
        v1.get("runs/:run") { request, context in
            let run = try context.parameters.runID()
            return try JSONResponse.make(
                try await core.waitForEnd(of: run, timeout: try request.uri.waitQuery() ?? .zero))
        }
    }

    private func status() async throws -> Response {
        try JSONResponse.make(
            DaemonStatus(
                version: Daemon.version, processID: ProcessInfo.processInfo.processIdentifier,
                stateDirectory: core.stateDirectory.path, socketPath: core.socketPath, startedAt: core.startedAt,
                now: core.clock.now, appCount: try await core.store.apps().count,
                runningRuns: try await core.store.runsInFlight().count,
                nextEvaluation: try await nextEvaluation(), appConfinement: core.appConfinement,
                appProcesses: core.appProcesses))
    }

    private func nextEvaluation() async throws -> Date? {
        try await core.store.appListing().compactMap(\.plan?.decision.dueAt).min()
    }

    private func register(_ registration: RegisterAppRequest) async throws -> Response {
        guard ProcessLauncher.isExecutable(registration.launchCommand.program) else {
            throw APIError(
                .badRequest, .launchCommandNotFound,
                "\(registration.launchCommand.program) is not an executable file; give an absolute path, or a name on bgd's PATH"
            )
        }
        let token = core.tokens.makeToken()
        let app = try await core.store.register(registration, tokenHash: TokenIssuer.hash(token), now: core.clock.now)
        _ = try? core.stateDirectory.container(for: app.id)
        core.activity.emit(.appRegistered(app.id))
        core.schedulerDoorbell.ring()
        core.logger.notice("App registered", metadata: ["app.id": "\(app.id)"])
        return try JSONResponse.make(
            RegisteredApp(app: try await core.summary(of: app), token: token.rawValue), status: .created)
    }

    private func unregister(_ id: AppID) async throws -> Response {
        try await core.store.revokeDeviceTokens(of: id, now: core.clock.now)  // pushes to it now answer 410
        guard try await core.store.unregister(id) else { throw APIError.unknownApp(id) }
        await core.coordinator.appUnregistered(id)
        await core.lifecycle.forget(id)
        await core.usage.forget(id)
        core.stateDirectory.removeContainer(for: id)
        core.activity.emit(.appUnregistered(id))
        core.schedulerDoorbell.ring()
        core.logger.notice("App unregistered", metadata: ["app.id": "\(id)"])
        return Response(status: .noContent)
    }

    private func why(_ id: AppID) async throws -> Response {
        try JSONResponse.make(try await core.why(id))
    }

    /// The wakes planned ahead if nothing new happens, and what binds each one.
    private func forecast(_ id: AppID, hours: Int) async throws -> Response {
        try JSONResponse.make(try await core.forecast(id, hours: hours))
    }
}

extension DaemonCore {
    /// What `bgctl why` shows.
    func why(_ id: AppID) async throws -> WakeExplanation {
        let core = self
        let app = try await core.requireApp(id)
        let plan = try await core.store.savedPlan(for: id)
        let runs = try await core.store.runs(of: id, limit: 10)
        let dayAgo = core.clock.now.addingTimeInterval(-86400)
        let pushes = try await core.store.pushes(of: id, limit: 200).filter { push in
            push.pushType == "background"
                && (push.state == .queued || ([.dropped, .replaced].contains(push.state) && push.receivedAt > dayAgo))
        }
        return WakeExplanation(
            app: id, fetchInterval: app.fetchInterval, decidedAt: plan?.decidedAt, nextWake: plan?.decision.dueAt,
            reasons: plan?.decision.reasons ?? [], running: runs.first { $0.isRunning },
            recentRuns: runs.filter { !$0.isRunning }, basedOnRun: plan?.basedOnRun,
            pushes: Array(pushes.prefix(10)).map(PushRecord.init))
    }

    /// The wakes planned over the next `hours` if nothing new happens (`bgctl forecast`).
    func forecast(_ id: AppID, hours: Int) async throws -> WakeForecast {
        let core = self
        _ = try await core.requireApp(id)
        let now = core.clock.now
        guard let candidate = try await core.store.fetchCandidates().first(where: { $0.app == id }) else {
            throw APIError.unknownApp(id)
        }
        let outlook = await core.usage.outlook(now: now)
        return outlook.forecast(
            for: candidate, policy: core.fetchPolicy, conditions: await core.conditions.effective,
            until: now.addingTimeInterval(Double(hours) * 3600), now: now)
    }
}

extension AdminRoutes {

    /// `bgctl simulate fetch`: a run through exactly the production path, started now.
    private func simulateFetch(_ id: AppID, wait: Duration?) async throws -> Response {
        _ = try await core.requireApp(id)
        let run = try await core.coordinator.startFetch(
            for: id, trigger: .manual, reasons: [DecisionReason(.manualRequest, "requested with bgctl simulate fetch")])
        guard let wait else { return try JSONResponse.make(run, status: .accepted) }
        return try JSONResponse.make(try await core.waitForEnd(of: run.id, timeout: wait))
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
