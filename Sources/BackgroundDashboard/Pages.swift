import BackgroundModel
import Foundation

/// One app's line on the overview.
public struct AppOverview: Sendable {
    public var summary: AppSummary
    /// How much the user uses it: `daily`, `weekly`, `rarely`, `never opened`.
    public var usageTier: String
    /// Wakes in the last 24 hours (what of the day's budget it has used).
    public var wakesToday: Int
    /// The wakes its use earns in 24 hours (nil: never opened, woken on its interval at most).
    public var wakeBudget: Int?

    public init(summary: AppSummary, usageTier: String, wakesToday: Int, wakeBudget: Int? = nil) {
        self.wakeBudget = wakeBudget
        self.summary = summary
        self.usageTier = usageTier
        self.wakesToday = wakesToday
    }

    /// The tier for an app opened `opensPerDay` times a day on average (nil: never opened).
    public static func tier(opensPerDay: Double?) -> String {
        guard let opensPerDay else { return "never opened" }
        return opensPerDay >= 1 ? "daily" : opensPerDay >= 1.0 / 7 ? "weekly" : "rarely"
    }
}

/// The pages bgd's dashboard serves; each renders the `<main>` part (for live updates) and the
/// whole page.
public enum DashboardPages {
    public static func overview(
        apps: [AppOverview], transfers: [TransferRecord], timeline: Timeline, range: String = "day", now: Date
    ) -> String {
        var html = "<h1>Apps</h1>"
        if apps.isEmpty {
            html +=
                "<p>No apps registered. <span class=\"code\">bgctl register APP-ID --interval minimum -- /path/to/app</span></p>"
        } else {
            html +=
                "<div class=\"scroll\"><table id=\"apps\"><tr><th>app</th><th>state</th><th>interval</th><th>usage</th><th>wakes in 24 h / budget</th><th>next wake and why</th></tr>"
            for app in apps {
                let summary = app.summary
                html += "<tr class=\"app\" data-app=\"\(HTML.escape(summary.id.rawValue))\">"
                html +=
                    "<td><a href=\"/apps/\(HTML.escape(summary.id.rawValue))\">\(HTML.escape(summary.id.rawValue))</a></td>"
                html +=
                    "<td>\(HTML.escape(state(summary, now: now)))</td><td>\(HTML.escape(summary.fetchInterval.description))</td>"
                let budget =
                    app.wakeBudget.map { " of \($0) (\(max(0, $0 - app.wakesToday)) left)" }
                    ?? " (no per-app budget: never opened, or the learned planner budgets the user)"
                html += "<td>\(HTML.escape(app.usageTier))</td><td>\(app.wakesToday)\(budget)</td>"
                html += "<td>\(nextWake(summary.nextWake, summary.nextWakeReasons, now: now))</td></tr>"
            }
            html += "</table></div>"
        }
        html += "<nav class=\"range\"><a href=\"/?range=day\">last day</a><a href=\"/?range=week\">last week</a></nav>"
        html +=
            "<h2>All apps, the last \(range == "week" ? "week" : "day")</h2>"
            + timeline.svg(label: "timeline of all apps")
        html += transfersTable(transfers)
        return html
    }

    public static func app(
        summary: AppSummary, why: WakeExplanation, forecast: WakeForecast?, timeline: Timeline, range: String,
        usageTier: String, now: Date
    ) -> String {
        let id = HTML.escape(summary.id.rawValue)
        var html = "<h1>\(id)</h1>"
        html +=
            "<p>\(HTML.escape(state(summary, now: now))) · interval \(HTML.escape(summary.fetchInterval.description)) · usage \(HTML.escape(usageTier))</p>"
        html += "<h2>Next wake</h2><div id=\"why\">\(nextWake(why.nextWake, why.reasons, now: now))</div>"
        if let running = why.running {
            html += "<p>Running now: run \(running.id), deadline \(HTML.escape(when(running.deadline, now: now))).</p>"
        }
        html +=
            "<nav class=\"range\"><a href=\"/apps/\(id)?range=day\">last day</a><a href=\"/apps/\(id)?range=week\">last week</a></nav>"
        html +=
            "<h2>Timeline (\(range == "week" ? "last week" : "last day"))</h2>"
            + timeline.svg(label: "timeline of \(summary.id.rawValue)")
        if let forecast {
            html += "<h2>The next 24 hours, if nothing changes</h2>"
            if forecast.wakes.isEmpty {
                html +=
                    "<p class=\"reasons\">No wake planned\(forecast.holdback.map { ": " + HTML.escape($0.detail) } ?? "").</p>"
            } else {
                html += "<table id=\"forecast\"><tr><th>when</th><th>why</th></tr>"
                for wake in forecast.wakes {
                    html +=
                        "<tr class=\"planned\"><td>\(HTML.escape(when(wake.at, now: now)))</td><td>\(reason(wake.reason))</td></tr>"
                }
                html += "</table>"
            }
        }
        html +=
            "<h2>Recent runs</h2><div class=\"scroll\"><table id=\"runs\"><tr><th>run</th><th>started</th><th>trigger</th><th>result</th><th>CPU</th><th>peak memory</th><th>why</th></tr>"
        for run in why.recentRuns + (why.running.map { [$0] } ?? []) {
            html +=
                "<tr><td>\(run.id)</td><td>\(HTML.escape(when(run.startedAt, now: now)))</td><td>\(HTML.escape(run.trigger.rawValue))</td>"
            html +=
                "<td>\(HTML.escape(run.outcome?.rawValue ?? "running"))</td><td>\(HTML.escape(run.cpuDescription))</td>"
            html += "<td>\(HTML.escape(run.memoryDescription))</td><td>\(run.reasons.first.map(reason) ?? "")</td></tr>"
        }
        html += "</table></div>"
        if !why.pushes.isEmpty {
            html += "<h2>Pushes that wait or will not wake it</h2><ul>"
            for push in why.pushes {
                html +=
                    "<li>\(HTML.escape(push.state.rawValue)) \(HTML.escape(push.apnsID)): \(push.reasonCode.map { "<span class=\"code\">\($0.rawValue)</span> " } ?? "")\(HTML.escape(push.reason ?? ""))</li>"
            }
            html += "</ul>"
        }
        return html
    }

    static func transfersTable(_ transfers: [TransferRecord]) -> String {
        guard !transfers.isEmpty else { return "<h2>Transfers</h2><p>None.</p>" }
        var html =
            "<h2>Transfers</h2><div class=\"scroll\"><table id=\"transfers\"><tr><th>id</th><th>app</th><th>state</th><th>progress</th><th>attempts</th></tr>"
        for transfer in transfers {
            let expected = transfer.bytesExpected ?? 0
            let done = transfer.bytesReceived ?? transfer.bytesTransferred
            let share = expected > 0 ? min(1, Double(done) / Double(expected)) : (transfer.state == .completed ? 1 : 0)
            html +=
                "<tr class=\"transfer\"><td>\(HTML.escape(transfer.id.description))</td><td>\(HTML.escape(transfer.app?.rawValue ?? "operator"))</td>"
            html +=
                "<td>\(HTML.escape(transfer.state.rawValue))\(transfer.waitingReason.map { " — " + HTML.escape($0) } ?? "")</td>"
            html +=
                "<td><div class=\"bar\" title=\"\(done) of \(expected > 0 ? String(expected) : "?") bytes\"><div style=\"width:\(Int(share * 100))%\"></div></div></td>"
            html += "<td>\(transfer.attempts)</td></tr>"
        }
        return html + "</table></div>"
    }

    static func state(_ summary: AppSummary, now: Date) -> String {
        guard let lifecycle = summary.lifecycle else { return summary.isConnected ? "connected" : "not running" }
        var words = lifecycle.state.rawValue
        if !lifecycle.tasks.isEmpty {
            words += ", \(lifecycle.tasks.count) background task\(lifecycle.tasks.count == 1 ? "" : "s")"
        }
        if lifecycle.state == .background, let deadline = lifecycle.deadline {
            words += ", \(max(0, Int(deadline.timeIntervalSince(now))))s left"
        }
        return words
    }

    static func nextWake(_ next: Date?, _ reasons: [DecisionReason], now: Date) -> String {
        let head = next.map { "<strong>\(HTML.escape(when($0, now: now)))</strong>" } ?? "<strong>not planned</strong>"
        return head + "<ul class=\"reasons\">" + reasons.map { "<li>\(reason($0))</li>" }.joined() + "</ul>"
    }

    static func reason(_ reason: DecisionReason) -> String {
        "<span class=\"code\">\(reason.code.rawValue)</span> \(HTML.escape(reason.detail))"
    }

    /// "in 12 min", "3 h ago".
    static func when(_ date: Date, now: Date) -> String {
        let seconds = date.timeIntervalSince(now)
        let magnitude = abs(seconds)
        let amount: String =
            magnitude < 90
            ? "\(Int(magnitude)) s"
            : magnitude < 5400
                ? "\(Int(magnitude / 60)) min"
                : magnitude < 172_800 ? "\(Int(magnitude / 3600)) h" : "\(Int(magnitude / 86400)) days"
        return seconds >= 0 ? "in \(amount)" : "\(amount) ago"
    }
}
