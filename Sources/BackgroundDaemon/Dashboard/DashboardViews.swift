import BackgroundDashboard
import BackgroundModel
import BackgroundPolicy
import BackgroundStore
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import ServiceLifecycle

/// Gathers what the dashboard shows from the read models the `/v1/` API serves, and hands it to
/// `BackgroundDashboard` to render.
struct DashboardViews: Sendable {
    let apps: Apps
    let runs: Runs
    let pushes: Pushes
    let transfers: Transfers
    let activity: ActivityFeed
    let clock: any WallClock
    let recent: RecentActivity
    let info: DaemonInfo
    let store: BackgroundStore

    func overview(range: DashboardRange = .day) async throws -> String {
        let now = clock.now
        let dayAgo = now.addingTimeInterval(-86400)
        var rows: [AppOverview] = []
        var marks: [Timeline.Mark] = []
        var failures = 0
        let summaries = try await apps.summaries()
        let budgets = await runs.dailyWakeBudgets(of: summaries.map(\.id))
        for summary in summaries {
            let history = try await runs.history(of: summary.id, limit: 500)
            let lastDay = history.filter { $0.startedAt > dayAgo }
            failures += lastDay.filter { $0.outcome.map(AppOverview.isTrouble) ?? false }.count
            rows.append(
                AppOverview(
                    summary: summary, usageTier: try await usageTier(of: summary.id, now: now),
                    // bgd's own wakes: the operator's runs (simulate fetch, tasks run) spend none.
                    wakesToday: lastDay.count { $0.trigger != .manual }, wakeBudget: budgets[summary.id]))
            marks += try await self.marks(
                of: summary.id, runs: history, since: now.addingTimeInterval(-range.span), labelled: true)
            if let next = summary.nextWake {
                let why = summary.nextWakeReasons.last.map { ": \($0.code.rawValue)" } ?? ""
                marks.append(
                    Timeline.Mark(row: .wakes, at: next, classes: "planned", title: "\(summary.id): next wake\(why)"))
            }
        }
        let timeline = Timeline(
            from: now.addingTimeInterval(-range.span), until: now.addingTimeInterval(range.ahead), marks: marks, now: now)
        let gauges = try await store.gauges()
        let tiles = DashboardTiles(
            status: try await info.status(), appsInTrouble: rows.filter(\.inTrouble).count,
            failuresInLastDay: failures, activeTransfers: gauges.activeTransfers, outboxDepth: gauges.openEvents)
        let lines = try await transfers.list(for: .operator, limit: 50).map { record in
            DashboardPages.TransferLine(record: record, bytesPerSecond: speed(of: record))
        }
        return DashboardPages.overview(
            apps: rows, tiles: tiles, transfers: lines, timeline: timeline, range: range, now: now)
    }

    /// While it runs, the rate between its last two checkpoints this bgd saw; once completed,
    /// its average from hand-over to the end.
    private func speed(of record: TransferRecord) -> Double? {
        switch record.state {
        case .running: return recent.rate(of: record.id)
        case .completed:
            guard let end = record.finishedAt else { return nil }
            let took = end.timeIntervalSince(record.createdAt)
            return took > 0 ? Double(record.bytesTransferred) / took : nil
        default: return nil
        }
    }

    func app(_ id: AppID, range: DashboardRange) async throws -> String? {
        guard try await apps.exists(id) else { return nil }
        let now = clock.now
        let summary = try await apps.summary(of: id)
        let history = try await runs.history(of: id, limit: 2000)
        let forecast = try await runs.forecast(id, hours: 24)
        var marks = try await self.marks(
            of: id, runs: history, since: now.addingTimeInterval(-range.span), labelled: false)
        marks += forecast.wakes.map {
            Timeline.Mark(row: .wakes, at: $0.at, classes: "planned", title: "planned: \($0.reason.code.rawValue)")
        }
        let timeline = Timeline(
            from: now.addingTimeInterval(-range.span), until: now.addingTimeInterval(range.ahead), marks: marks,
            now: now)
        return DashboardPages.app(
            summary: summary, why: try await runs.why(id), forecast: forecast, timeline: timeline, range: range,
            usageTier: try await usageTier(of: id, now: now), now: now)
    }

    private func usageTier(of id: AppID, now: Date) async throws -> String {
        let opens = try await apps.opens(of: id)
        guard !opens.isEmpty else { return AppOverview.tier(opensPerDay: nil) }
        return AppOverview.tier(opensPerDay: UsageModel.learning(from: opens).opensPerDay(now: now))
    }

    /// Every mark of one app since `since`: opens, wakes, pushes, transfers, tasks and lifecycle.
    private func marks(of id: AppID, runs: [RunRecord], since: Date, labelled: Bool) async throws -> [Timeline.Mark] {
        let prefix = labelled ? "\(id): " : ""
        var marks: [Timeline.Mark] = []
        for open in try await apps.opens(of: id) where open >= since {
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
        for push in try await pushes.pushes(of: id, limit: 500) where push.receivedAt >= since {
            marks.append(
                Timeline.Mark(
                    row: .pushes, at: push.receivedAt, classes: "push \(push.state)",
                    title: prefix
                        + "push \(push.pushType): \(push.state)\(push.reasonCode.map { " (\($0.rawValue))" } ?? "")"))
        }
        for transfer in try await transfers.list(for: .app(id))
        where (transfer.finishedAt ?? clock.now) >= since {
            marks.append(
                Timeline.Mark(
                    row: .transfers, at: transfer.createdAt, until: transfer.finishedAt ?? clock.now,
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

    /// Server-sent events: a line per thing the daemon does, so open pages re-render, and a
    /// keep-alive comment every 30 s (`DashboardEventLines`).
    func events(_ request: Request) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/event-stream"
        headers[.cacheControl] = "no-store"
        let (feed, endFeed) = activity.subscription()
        return Response(
            status: .ok, headers: headers,
            body: ResponseBody { writer in
                do {
                    // The feed never ends by itself: on a graceful shutdown it is ended, and the
                    // response with it. Before, an open tab held bgd's stop until it was killed
                    // (systemd's TimeoutStopSec). The page reconnects to the next bgd
                    // (EventSource does by itself).
                    try await withGracefulShutdownHandler {
                        try await request.body.consumeWithCancellationOnInboundClose { _ in
                            for await line in DashboardEventLines.make(feed: feed, clock: clock) {
                                try await writer.write(ByteBuffer(string: line))
                            }
                        }
                    } onGracefulShutdown: {
                        endFeed()
                    }
                } catch is CancellationError {
                    return
                }
                try await writer.finish(nil)
            })
    }
}
