import BackgroundDashboard
import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ServiceLifecycle

/// Gathers what the dashboard shows from the store and the daemon, and hands it to
/// `BackgroundDashboard` to render.
struct DashboardViews: Sendable {
    let core: DaemonCore
    let recent: RecentActivity

    func overview(range: String = "day") async throws -> String {
        let now = core.clock.now
        let span: TimeInterval = range == "week" ? 7 * 86400 : 86400
        var rows: [AppOverview] = []
        var marks: [Timeline.Mark] = []
        let outlook = await core.usage.outlook(now: now)
        for app in try await core.store.apps() {
            let summary = try await core.summary(of: app)
            let runs = try await core.store.runs(of: app.id, limit: 500)
            rows.append(
                AppOverview(
                    summary: summary, usageTier: try await usageTier(of: app.id, now: now),
                    wakesToday: runs.filter { $0.startedAt > now.addingTimeInterval(-86400) }.count,
                    wakeBudget: outlook.dailyWakeBudget(for: app.id, now: now)))
            marks += try await self.marks(of: app.id, runs: runs, since: now.addingTimeInterval(-span), labelled: true)
        }
        let timeline = Timeline(from: now.addingTimeInterval(-span), until: now.addingTimeInterval(3600), marks: marks)
        return DashboardPages.overview(
            apps: rows, transfers: try await core.store.transfers(limit: 50), timeline: timeline, range: range, now: now
        )
    }

    func app(_ id: AppID, range: String) async throws -> String? {
        guard let app = try await core.store.app(id) else { return nil }
        let now = core.clock.now
        let span: TimeInterval = range == "week" ? 7 * 86400 : 86400
        let summary = try await core.summary(of: app)
        let runs = try await core.store.runs(of: id, limit: 2000)
        let forecast = try await core.forecast(id, hours: 24)
        var marks = try await self.marks(of: id, runs: runs, since: now.addingTimeInterval(-span), labelled: false)
        marks += forecast.wakes.map {
            Timeline.Mark(row: .wakes, at: $0.at, classes: "planned", title: "planned: \($0.reason.code.rawValue)")
        }
        let timeline = Timeline(
            from: now.addingTimeInterval(-span), until: now.addingTimeInterval(span == 86400 ? 6 * 3600 : 86400),
            marks: marks)
        return DashboardPages.app(
            summary: summary, why: try await core.why(id), forecast: forecast, timeline: timeline, range: range,
            usageTier: try await usageTier(of: id, now: now), now: now)
    }

    private func usageTier(of id: AppID, now: Date) async throws -> String {
        let opens = try await core.store.opens(of: id)
        guard !opens.isEmpty else { return AppOverview.tier(opensPerDay: nil) }
        return AppOverview.tier(opensPerDay: UsageModel.learning(from: opens).opensPerDay(now: now))
    }

    /// Every mark of one app since `since`: opens, wakes, pushes, transfers, tasks and lifecycle.
    private func marks(of id: AppID, runs: [RunRecord], since: Date, labelled: Bool) async throws -> [Timeline.Mark] {
        let prefix = labelled ? "\(id): " : ""
        var marks: [Timeline.Mark] = []
        for open in try await core.store.opens(of: id) where open >= since {
            marks.append(Timeline.Mark(row: .opens, at: open, classes: "open", title: prefix + "opened"))
        }
        for run in runs where (run.endedAt ?? run.startedAt) >= since {
            let result = run.outcome?.rawValue ?? "running"
            let why = run.reasons.first.map { " (\($0.code.rawValue))" } ?? ""
            if let task = run.taskIdentifier {
                marks.append(
                    Timeline.Mark(
                        row: .tasks, at: run.startedAt, classes: "run task \(result)",
                        title: prefix + "task \(task): \(result)"))
            } else {
                marks.append(
                    Timeline.Mark(
                        row: .wakes, at: run.startedAt, classes: "run \(result)",
                        title: prefix + "\(run.trigger.rawValue) run \(run.id): \(result)\(why)"))
            }
        }
        for push in try await core.store.pushes(of: id, limit: 500) where push.receivedAt >= since {
            marks.append(
                Timeline.Mark(
                    row: .pushes, at: push.receivedAt, classes: "push \(push.state)",
                    title: prefix
                        + "push \(push.pushType): \(push.state)\(push.reasonCode.map { " (\($0.rawValue))" } ?? "")"))
        }
        for transfer in try await core.store.transfers(app: id, limit: 200)
        where (transfer.finishedAt ?? core.clock.now) >= since {
            marks.append(
                Timeline.Mark(
                    row: .transfers, at: transfer.createdAt, until: transfer.finishedAt ?? core.clock.now,
                    classes: "transfer \(transfer.state.rawValue)",
                    title: prefix
                        + "transfer \(transfer.id): \(transfer.state.rawValue), \(transfer.attempts) attempt(s)"))
        }
        for moment in recent.moments(of: id) where moment.at >= since {
            marks.append(
                Timeline.Mark(row: .tasks, at: moment.at, classes: moment.classes, title: prefix + moment.title))
        }
        return marks
    }

    /// Server-sent events: a line per thing the daemon does, so open pages re-render.
    func events(_ request: Request) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/event-stream"
        headers[.cacheControl] = "no-store"
        let feed = core.activity.subscribe()
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                try await writer.write(ByteBuffer(string: ": bgd\n\n"))
                do {
                    try await withGracefulShutdownHandler {
                        try await request.body.consumeWithCancellationOnInboundClose { _ in
                            for await activity in feed {
                                if case .transferCheckpointed = activity { continue }  // progress alone does not warrant a re-render
                                try await writer.write(ByteBuffer(string: "data: \(Self.kind(of: activity))\n\n"))
                            }
                        }
                    } onGracefulShutdown: {
                    }
                } catch is CancellationError {
                    return
                }
                try await writer.finish(nil)
            })
    }

    static func kind(of activity: Activity) -> String {
        let text = "\(activity)"
        return String(text.prefix { $0 != "(" })
    }
}
