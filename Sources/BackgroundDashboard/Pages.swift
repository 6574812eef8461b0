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

    /// Its last run failed, crashed, expired or could not be launched: it is listed first.
    public var inTrouble: Bool { summary.lastRun?.outcome.map(AppOverview.isTrouble) ?? false }

    public static func isTrouble(_ outcome: RunOutcome) -> Bool {
        [.failed, .crashed, .expired, .launchFailed].contains(outcome)
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
    /// A transfer as the overview lists it: the record and, while bytes move, its speed.
    public struct TransferLine: Sendable {
        public var record: TransferRecord
        /// Bytes a second: measured between checkpoints while it runs, the average once completed.
        public var bytesPerSecond: Double?

        public init(record: TransferRecord, bytesPerSecond: Double? = nil) {
            self.record = record
            self.bytesPerSecond = bytesPerSecond
        }
    }

    /// Trouble first: the tiles, then the apps (those whose last run went wrong on top), the
    /// timeline of all of them with its legend, and the transfers.
    public static func overview(
        apps: [AppOverview], tiles: DashboardTiles, transfers: [TransferLine], timeline: Timeline,
        range: DashboardRange = .day, now: Date
    ) -> String {
        var html = readOnlyNotice + tiles.html() + "<h1>Apps</h1>"
        if apps.isEmpty {
            html +=
                "<p>No apps registered. <span class=\"code\">bgctl register APP-ID --interval minimum -- /path/to/app</span></p>"
        } else {
            html +=
                "<table id=\"apps\" class=\"cards\"><thead><tr><th>app</th><th>last result</th><th>state</th><th>interval</th><th>usage</th><th>wakes in 24 h / budget</th><th>next wake and why</th></tr></thead><tbody>"
            let ordered = apps.enumerated().sorted { a, b in
                a.element.inTrouble != b.element.inTrouble ? a.element.inTrouble : a.offset < b.offset
            }.map(\.element)
            for app in ordered {
                let summary = app.summary
                let id = HTML.escape(summary.id.rawValue)
                html += "<tr class=\"app\(app.inTrouble ? " trouble" : "")\" data-app=\"\(id)\">"
                html += "<td data-label=\"app\"><a href=\"/apps/\(id)\">\(id)</a></td>"
                html += lastResult(summary.lastRun, now: now)
                html += "<td data-label=\"state\">\(HTML.escape(state(summary, now: now)))</td>"
                html += "<td data-label=\"interval\">\(HTML.escape(summary.fetchInterval.description))</td>"
                let budget =
                    app.wakeBudget.map { " of \($0) (\(max(0, $0 - app.wakesToday)) left)" }
                    ?? " (no per-app budget: never opened, or the learned planner budgets the user)"
                html += "<td data-label=\"usage\">\(HTML.escape(app.usageTier))</td>"
                html += "<td data-label=\"wakes in 24 h\">\(app.wakesToday)\(budget)</td>"
                html +=
                    "<td data-label=\"next wake\">\(nextWake(summary.nextWake, summary.nextWakeReasons, now: now))</td></tr>"
            }
            html += "</tbody></table>"
        }
        html += "<h2>All apps, the \(range.label)</h2>" + DashboardRange.navigation(path: "/", current: range)
        html += timeline.svg(label: "timeline of all apps") + Timeline.legend()
        html += transfersTable(transfers, now: now)
        return html
    }

    static let readOnlyNotice =
        "<p id=\"readonly\" class=\"notice\">Read-only: this page shows what bgd does and why. Change things with <span class=\"code\">bgctl</span>.</p>"

    /// The last run's outcome, coloured by what it means (red: failed, crashed, could not launch;
    /// orange: expired), and when.
    static func lastResult(_ run: RunRecord?, now: Date) -> String {
        guard let run else { return "<td class=\"result\" data-label=\"last result\">never run</td>" }
        let outcome = run.outcome?.rawValue ?? "running"
        return
            "<td class=\"result outcome-\(HTML.escape(outcome))\" data-label=\"last result\"><span class=\"pill\">\(HTML.escape(outcome))</span> \(HTML.escape(when(run.startedAt, now: now)))</td>"
    }

    public static func app(
        summary: AppSummary, why: WakeExplanation, forecast: WakeForecast?, timeline: Timeline, range: DashboardRange,
        usageTier: String, now: Date
    ) -> String {
        let id = HTML.escape(summary.id.rawValue)
        var html = readOnlyNotice + "<h1>\(id)</h1>"
        html +=
            "<p>\(HTML.escape(state(summary, now: now))) · interval \(HTML.escape(summary.fetchInterval.description)) · usage \(HTML.escape(usageTier))</p>"
        html += "<h2>Next wake</h2><div id=\"why\">\(nextWake(why.nextWake, why.reasons, now: now))</div>"
        if let running = why.running {
            html += "<p>Running now: run \(running.id), deadline \(HTML.escape(when(running.deadline, now: now))).</p>"
        }
        html += "<h2>Timeline, the \(range.label)</h2>" + DashboardRange.navigation(path: "/apps/\(id)", current: range)
        html += timeline.svg(label: "timeline of \(summary.id.rawValue)") + Timeline.legend()
        if let forecast {
            html += "<h2>The next 24 hours, if nothing changes</h2>"
            if forecast.wakes.isEmpty {
                html +=
                    "<p class=\"reasons\">No wake planned\(forecast.holdback.map { ": " + HTML.escape($0.detail) } ?? "").</p>"
            } else {
                html += "<table id=\"forecast\"><tr><th>when</th><th>why</th></tr>"
                for wake in forecast.wakes {
                    html +=
                        "<tr class=\"planned\"><td>\(HTML.escape(when(wake.at, now: now)))</td><td>\(reason(wake.reason, now: now))</td></tr>"
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
                "<td class=\"result outcome-\(HTML.escape(run.outcome?.rawValue ?? "running"))\"><span class=\"pill\">\(HTML.escape(run.outcome?.rawValue ?? "running"))</span></td><td>\(HTML.escape(run.cpuDescription))</td>"
            html += "<td>\(HTML.escape(run.memoryDescription))</td><td>\(run.reasons.first.map { reason($0, now: now) } ?? "")</td></tr>"
        }
        html += "</table></div>"
        if !why.pushes.isEmpty {
            html += "<h2>Pushes that wait or will not wake it</h2><ul>"
            for push in why.pushes {
                html +=
                    "<li>\(HTML.escape(push.state.rawValue)) \(HTML.escape(push.apnsID))\(push.triesDescription.map { " (\($0))" } ?? ""): \(push.reasonCode.map { "<span class=\"code\">\($0.rawValue)</span> " } ?? "")\(HTML.escape(push.reason ?? ""))</li>"
            }
            html += "</ul>"
        }
        return html
    }

    /// Each transfer with what a downloader shows: the URL and the file, size, speed, the
    /// error and when it retries; the bar is coloured by state, so a failed transfer is red at
    /// the share it reached, not a full blue bar.
    static func transfersTable(_ transfers: [TransferLine], now: Date) -> String {
        guard !transfers.isEmpty else { return "<h2>Transfers</h2><p>None.</p>" }
        var html =
            "<h2>Transfers</h2><table id=\"transfers\" class=\"cards\"><thead><tr><th>id</th><th>app</th><th>URL and file</th><th>state</th><th>progress</th><th>size</th><th>speed</th><th>attempts</th><th>error or next try</th></tr></thead><tbody>"
        for line in transfers {
            let transfer = line.record
            let state = HTML.escape(transfer.state.rawValue)
            let expected = transfer.bytesExpected ?? 0
            let done = transfer.bytesReceived ?? transfer.bytesTransferred
            let share = expected > 0 ? min(1, Double(done) / Double(expected)) : (transfer.state == .completed ? 1 : 0)
            html += "<tr class=\"transfer \(state)\" data-transfer=\"\(transfer.id)\">"
            html += "<td data-label=\"id\">\(HTML.escape(transfer.id.description))</td>"
            html += "<td data-label=\"app\">\(HTML.escape(transfer.app?.rawValue ?? "operator"))</td>"
            // Text, not a link: an app chooses it, and a link to another port of this host would
            // carry the dashboard's cookie there (cookies are not kept apart by port).
            let url = HTML.escape(transfer.url.absoluteString)
            html +=
                "<td data-label=\"URL and file\" class=\"where\"><span class=\"url\">\(url)</span>\(transfer.destination.map { "<br><span class=\"code\">\(HTML.escape($0))</span>" } ?? "")</td>"
            html += "<td data-label=\"state\">\(HTML.escape(transfer.stateDescription))</td>"
            html +=
                "<td data-label=\"progress\"><div class=\"bar \(state)\" role=\"progressbar\" aria-valuenow=\"\(Int(share * 100))\" aria-valuemin=\"0\" aria-valuemax=\"100\" title=\"\(done) of \(expected > 0 ? String(expected) : "?") bytes\"><div style=\"width:\(Int(share * 100))%\"></div></div></td>"
            html +=
                "<td data-label=\"size\">\(bytes(done))\(transfer.bytesExpected.map { " of " + bytes($0) } ?? "")</td>"
            html += "<td data-label=\"speed\">\(line.bytesPerSecond.map { bytes(Int64($0)) + "/s" } ?? "—")</td>"
            html +=
                "<td data-label=\"attempts\">\(transfer.attempts)\(transfer.restarts > 0 ? " (\(transfer.restarts) restarts)" : "")</td>"
            var problem = transfer.error?.description ?? transfer.waitingReason ?? ""
            if transfer.state == .waiting, let next = transfer.nextAttemptAt {
                problem = "retries \(when(next, now: now))" + (transfer.lastError.map { ": " + $0 } ?? "")
            }
            html += "<td data-label=\"error or next try\" class=\"problem\">\(HTML.escape(problem))</td></tr>"
        }
        return html + "</tbody></table>"
    }

    /// "3.4 MiB".
    static func bytes(_ count: Int64) -> String { ByteCount.describe(count) }

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
        return head + "<ul class=\"reasons\">" + reasons.map { "<li>\(reason($0, now: now))</li>" }.joined() + "</ul>"
    }

    /// A reason, the times bgd wrote in it (ISO 8601, UTC) told as the page tells every time
    /// ("in 40 min"), the exact time kept in the element for a hover.
    static func reason(_ reason: DecisionReason, now: Date) -> String {
        let detail = WireCoding.replacingTimes(in: HTML.escape(reason.detail)) { date, written in
            "<time datetime=\"\(written)\" title=\"\(written)\">\(when(date, now: now))</time>"
        }
        return "<span class=\"code\">\(reason.code.rawValue)</span> \(detail)"
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
