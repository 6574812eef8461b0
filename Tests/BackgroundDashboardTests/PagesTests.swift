import BackgroundDashboard
import BackgroundModel
import Foundation
import Testing

struct PagesTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)

    func summary(_ id: String, lastOutcome: RunOutcome? = nil) -> AppSummary {
        AppSummary(
            id: AppID(rawValue: id)!, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum,
            registeredAt: now,
            isConnected: false,
            lastRun: lastOutcome.map {
                RunRecord(
                    id: RunID(7), app: AppID(rawValue: id)!, trigger: .scheduled, startedAt: now.addingTimeInterval(-3 * 3600),
                    deadline: now, endedAt: now, outcome: $0, reasons: [], launched: true, detail: nil)
            },
            nextWake: now.addingTimeInterval(600),
            nextWakeReasons: [DecisionReason(.predictedOpen, "the user usually opens it <around> 09:10")])
    }

    var tiles: DashboardTiles {
        DashboardTiles(
            status: DaemonStatus(
                version: "1.2.3", processID: 42, stateDirectory: "/home/u/.local/state/bgd", socketPath: "/run/bgd.sock",
                startedAt: now.addingTimeInterval(-7200), now: now, appCount: 3, runningRuns: 1, nextEvaluation: nil,
                appProcesses: "cgroup v2 (freeze, kill)"),
            appsInTrouble: 1, failuresInLastDay: 2, activeTransfers: 1, outboxDepth: 5)
    }

    func overview(_ apps: [AppOverview], transfers: [DashboardPages.TransferLine] = [], range: DashboardRange = .day)
        -> String
    {
        DashboardPages.overview(
            apps: apps, tiles: tiles, transfers: transfers,
            timeline: Timeline(from: now.addingTimeInterval(-range.span), until: now.addingTimeInterval(600), marks: [], now: now),
            range: range, now: now)
    }

    /// The overview's line: usage, the day's budget and what is left of it, the next wake with its reasons (escaped).
    @Test func theOverviewShowsBudgetAndReasons() {
        let html = overview([
            AppOverview(summary: summary("com.example.used"), usageTier: "daily", wakesToday: 4, wakeBudget: 6),
            AppOverview(summary: summary("com.example.unused"), usageTier: "never opened", wakesToday: 0),
        ])
        #expect(html.contains("4 of 6 (2 left)") && html.contains("(no per-app budget: never opened, or the learned planner budgets the user)"))
        #expect(html.contains("in 10 min") && html.contains("predictedOpen") && html.contains("&lt;around&gt;"))
        #expect(html.components(separatedBy: "<tr class=\"app\"").count - 1 == 2)
        #expect(html.contains("id=\"readonly\"") && html.contains("Read-only"))
    }

    /// A time inside a reason reads as the page's other times do, the exact one kept for a hover.
    @Test func timesInReasonsAreToldFromNow() {
        var app = summary("com.example.coalesced")
        let due = now.addingTimeInterval(40 * 60)
        app.nextWakeReasons = [DecisionReason(.coalesced, "due at \(WireCoding.format(due)); shares one wake-up")]
        let html = overview([AppOverview(summary: app, usageTier: "daily", wakesToday: 0)])
        #expect(
            html.contains("due at <time datetime=\"\(WireCoding.format(due))\" title=\"\(WireCoding.format(due))\">in 40 min</time>"),
            "\(html)")
    }

    /// Trouble first: an app whose last run failed, crashed or expired leads the list whatever its
    /// name, its result cell carries the outcome's class, and one never run says so.
    @Test func appsInTroubleComeFirstWithTheirOutcome() throws {
        let html = overview([
            AppOverview(summary: summary("com.example.a", lastOutcome: .newData), usageTier: "daily", wakesToday: 1),
            AppOverview(summary: summary("com.example.b"), usageTier: "daily", wakesToday: 0),
            AppOverview(summary: summary("com.example.z", lastOutcome: .crashed), usageTier: "daily", wakesToday: 1),
            AppOverview(summary: summary("com.example.y", lastOutcome: .expired), usageTier: "daily", wakesToday: 1),
        ])
        let order = html.components(separatedBy: "data-app=\"").dropFirst().map { $0.prefix { $0 != "\"" } }
        #expect(order == ["com.example.z", "com.example.y", "com.example.a", "com.example.b"])
        #expect(html.contains("<tr class=\"app trouble\" data-app=\"com.example.z\">"))
        #expect(html.contains("result outcome-crashed") && html.contains("result outcome-expired"))
        #expect(html.contains("result outcome-newData") && html.contains("never run"))
    }

    /// The tiles: apps and how many in trouble, runs in flight, failures in 24 h, transfers,
    /// the outbox, and which bgd (version, uptime, state directory, how it holds apps).
    @Test func theTilesSayWhatIsGoingOn() {
        let html = overview([])
        for expected in [
            "apps, 1 in trouble", "run in flight", "failed, crashed or expired in 24 h", "transfers active",
            "events waiting for apps", "bgd 1.2.3", "up 2h", "/home/u/.local/state/bgd", "cgroup v2 (freeze, kill)",
        ] {
            #expect(html.contains(expected), "\(expected)")
        }
        #expect(html.contains("<div class=\"tile trouble\" id=\"tile-failures\"><b>2</b>"))
        #expect(html.contains("id=\"tile-outbox\"><b>5</b>"))
    }

    /// Every range has its link (the current one marked); the timeline has its legend and a now line.
    @Test(arguments: DashboardRange.allCases)
    func rangesLegendAndNow(_ range: DashboardRange) {
        let html = overview([], range: range)
        for other in DashboardRange.allCases { #expect(html.contains("href=\"/?range=\(other.rawValue)\"")) }
        #expect(html.contains("<a href=\"/?range=\(range.rawValue)\" aria-current=\"page\">"))
        #expect(html.contains("the \(range.label)"))
        #expect(html.contains("<line class=\"now\"") && html.contains("class=\"legend\""))
        #expect(DashboardRange(query: "fortnight") == .day)
    }

    /// A transfer shows where from and to, size, speed, attempts and why it waits; its bar takes
    /// its state's class, so a failed one is not drawn as a full blue bar.
    @Test func transfersShowSizeSpeedErrorAndState() {
        func record(_ id: Int64, _ state: TransferState, bytes: Int64, error: TransferError? = nil, next: Date? = nil)
            -> TransferRecord
        {
            TransferRecord(
                id: TransferID(id), app: nil, session: "bgctl", kind: .download,
                url: URL(string: "https://example.org/big.iso")!, taskDescription: nil, state: state,
                bytesTransferred: bytes, bytesExpected: 4 << 20, attempts: 2, restarts: 0, nextAttemptAt: next,
                waitingReason: nil, lastError: next == nil ? nil : "HTTP 503", error: error, statusCode: nil,
                createdAt: now.addingTimeInterval(-60), finishedAt: nil, destination: "/home/u/big.iso",
                isDiscretionary: false)
        }
        let html = overview(
            [],
            transfers: [
                .init(record: record(1, .running, bytes: 1 << 20), bytesPerSecond: 512 * 1024),
                .init(record: record(2, .failed, bytes: 2 << 20, error: TransferError(.httpError, "HTTP 404"))),
                .init(record: record(3, .waiting, bytes: 0, next: now.addingTimeInterval(8))),
                .init(record: record(4, .running, bytes: 0)),
            ])
        #expect(html.contains("https://example.org/big.iso") && html.contains("/home/u/big.iso"))
        #expect(html.contains("1.0 MiB of 4.0 MiB") && html.contains("512.0 KiB/s"))
        #expect(html.contains("<div class=\"bar failed\"") && html.contains("aria-valuenow=\"50\""))
        #expect(html.contains("httpError: HTTP 404"))
        #expect(html.contains("retries in 8 s: HTTP 503"))
        // An attempt that has moved nothing yet is connecting, not "running 0 B"; one with bytes runs.
        let states = html.components(separatedBy: "<td data-label=\"state\">").dropFirst().map { $0.prefix { $0 != "<" } }
        #expect(states == ["running", "failed", "waiting", "connecting"], "\(states)")
    }

    /// A push that waits to go again says how many runs it has already spent a wake on; one not
    /// sent yet says nothing of tries.
    @Test func anAppsPushesSayHowOftenTheyWereTried() {
        func push(_ id: Int64, _ state: PushState, _ code: ReasonCode, _ reason: String, attempts: Int) -> PushRecord {
            PushRecord(
                id: PushID(id), apnsID: "00000000-0000-0000-0000-00000000000\(id)", pushType: "background", priority: 5,
                collapseID: nil, expiration: nil, receivedAt: now.addingTimeInterval(-60), state: state, reasonCode: code,
                reason: reason, payload: "{}", attempts: attempts)
        }
        let why = WakeExplanation(
            app: AppID(rawValue: "com.example.news")!, fetchInterval: .minimum, decidedAt: now, nextWake: nil,
            reasons: [], running: nil, recentRuns: [],
            pushes: [
                push(1, .queued, .pushRetry, "run 4 ended as crashed before the app answered; it goes again", attempts: 1),
                push(2, .queued, .pushThrottled, "held", attempts: 0),
            ])
        let html = DashboardPages.app(
            summary: summary("com.example.news"), why: why, forecast: nil,
            timeline: Timeline(from: now.addingTimeInterval(-86400), until: now, marks: [], now: now), range: .day,
            usageTier: "daily", now: now)
        #expect(html.contains("00000000-0000-0000-0000-000000000001 (1 try): "), "\(html)")
        #expect(html.contains("00000000-0000-0000-0000-000000000002: "))
    }
}
