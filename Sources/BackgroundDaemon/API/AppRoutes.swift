import BackgroundModel
import Foundation
import Hummingbird

/// The endpoints an app calls about itself, under `/v1/app` behind `AppAuthentication`.
struct AppRoutes {
    let apps: Apps
    let runs: Runs
    let events: AppEvents
    let coordinator: RunCoordinator

    func add(to app: RouterGroup<APIRequestContext>) {
        app.get { _, context in try JSONResponse.make(try await apps.summary(of: try context.appCaller().app)) }
        app.get("events") { request, context in
            try await EventStream(events: events, bearer: try context.appCaller()).response(for: request)
        }
        app.post("events/ack") { request, context in
            var request = request
            let ack = try await request.decodeJSON(EventAcknowledgement.self)
            try await events.acknowledge(upTo: ack.seq, only: ack.only == true, for: try context.appCaller().app)
            return Response(status: .noContent)
        }
        app.post("runs/:run/result") { request, context in
            var request = request
            let run = try context.parameters.runID()
            let report = try await request.decodeJSON(FetchResultReport.self)
            return try JSONResponse.make(
                try await coordinator.reportResult(report.result, for: run, from: try context.appCaller().app))
        }
        app.put("fetch-interval") { request, context in
            var request = request
            let update = try await request.decodeJSON(FetchIntervalUpdate.self)
            return try JSONResponse.make(
                try await runs.setFetchInterval(update.interval, for: try context.appCaller().app))
        }
        app.post("opens") { _, context in
            try await apps.recordOpen(of: try context.appCaller().app)
            return Response(status: .noContent)
        }
    }
}
