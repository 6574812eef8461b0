import BackgroundModel
import BackgroundStore
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import NIOCore

/// The endpoints an app calls about itself, authenticated by its token.
struct AppRoutes {
    let core: DaemonCore

    func add(to router: Router<APIRequestContext>) {
        let app = router.group("v1/app")
        app.get { request, _ in
            let bearer = try await authenticate(request)
            return try JSONResponse.make(try await core.summary(of: try await core.requireApp(bearer.app)))
        }
        app.get("events") { request, _ in
            try await EventStream(core: core, bearer: try await authenticate(request)).response(for: request)
        }
        app.post("events/ack") { request, _ in
            var request = request
            let bearer = try await authenticate(request)
            let ack = try await request.decodeJSON(EventAcknowledgement.self)
            let last = try await core.store.lastEventSequence(for: bearer.app)
            guard ack.seq.rawValue >= 1, ack.seq <= last else {
                throw APIError(
                    .badRequest, .invalidSequence, "seq \(ack.seq) was never sent; the last event is \(last)")
            }
            try await core.store.acknowledge(upTo: ack.seq, for: bearer.app, now: core.clock.now)
            Failpoint.eventAfterAckCommit.hit()
            await core.coordinator.eventsAcknowledged(
                by: bearer.app, openRemaining: try await core.store.openEvents(for: bearer.app).count)
            return Response(status: .noContent)
        }
        app.post("runs/:run/result") { request, context in
            var request = request
            let bearer = try await authenticate(request)
            let run = try context.parameters.runID()
            let report = try await request.decodeJSON(FetchResultReport.self)
            return try JSONResponse.make(
                try await core.coordinator.reportResult(report.result, for: run, from: bearer.app))
        }
        app.put("fetch-interval") { request, _ in
            var request = request
            let bearer = try await authenticate(request)
            let update = try await request.decodeJSON(FetchIntervalUpdate.self)
            try await core.store.setFetchInterval(update.interval, for: bearer.app)
            core.schedulerDoorbell.ring()
            return try JSONResponse.make(try await core.summary(of: try await core.requireApp(bearer.app)))
        }
        app.post("opens") { request, _ in
            let bearer = try await authenticate(request)
            try await core.recordOpen(of: bearer.app)
            return Response(status: .noContent)
        }
    }

    /// Who is calling: `Authorization: Bearer <token>`, the app's own token or the one bgd gave
    /// a process it launched.
    func authenticate(_ request: Request) async throws -> TokenIssuer.Bearer {
        guard let header = request.headers[.authorization], header.hasPrefix("Bearer ") else {
            throw APIError.unauthorized
        }
        let token = String(header.dropFirst("Bearer ".count)).trimmingCharacters(in: .whitespaces)
        guard !token.isEmpty, token.utf8.count <= 256 else { throw APIError.unauthorized }
        if let bearer = core.tokens.launchBearer(for: token) { return bearer }
        guard let app = try await core.store.app(forTokenHash: TokenIssuer.hash(AppToken(rawValue: token))) else {
            throw APIError.unauthorized
        }
        return TokenIssuer.Bearer(app: app, launchedForRun: nil, isLaunched: false)
    }
}
