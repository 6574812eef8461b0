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

    func add(to router: Router<APIRequestContext>, appGroup: RouterGroup<APIRequestContext>) {
        let app = appGroup
        app.get { request, context in
            let bearer = try context.appCaller()
            return try JSONResponse.make(try await core.summary(of: try await core.requireApp(bearer.app)))
        }
        app.get("events") { request, context in
            try await EventStream(core: core, bearer: try context.appCaller()).response(for: request)
        }
        app.post("events/ack") { request, context in
            var request = request
            let bearer = try context.appCaller()
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
            let bearer = try context.appCaller()
            let run = try context.parameters.runID()
            let report = try await request.decodeJSON(FetchResultReport.self)
            return try JSONResponse.make(
                try await core.coordinator.reportResult(report.result, for: run, from: bearer.app))
        }
        app.put("fetch-interval") { request, context in
            var request = request
            let bearer = try context.appCaller()
            let update = try await request.decodeJSON(FetchIntervalUpdate.self)
            try await core.store.setFetchInterval(update.interval, for: bearer.app)
            core.schedulerDoorbell.ring()
            return try JSONResponse.make(try await core.summary(of: try await core.requireApp(bearer.app)))
        }
        app.post("opens") { request, context in
            let bearer = try context.appCaller()
            try await core.recordOpen(of: bearer.app)
            return Response(status: .noContent)
        }
    }
}
