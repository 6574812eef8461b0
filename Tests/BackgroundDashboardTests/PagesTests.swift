import BackgroundDashboard
import BackgroundModel
import Foundation
import Testing

struct PagesTests {
    let now = Date(timeIntervalSince1970: 1_767_603_600)

    func summary(_ id: String) -> AppSummary {
        AppSummary(
            id: AppID(rawValue: id)!, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum,
            registeredAt: now,
            isConnected: false, lastRun: nil, nextWake: now.addingTimeInterval(600),
            nextWakeReasons: [DecisionReason(.predictedOpen, "the user usually opens it <around> 09:10")])
    }

    /// The overview's line: usage, the day's budget and what is left of it, the next wake with its reasons (escaped).
    @Test func theOverviewShowsBudgetAndReasons() {
        let apps = [
            AppOverview(summary: summary("com.example.used"), usageTier: "daily", wakesToday: 4, wakeBudget: 6),
            AppOverview(summary: summary("com.example.unused"), usageTier: "never opened", wakesToday: 0),
        ]
        let html = DashboardPages.overview(
            apps: apps, transfers: [], timeline: Timeline(from: now.addingTimeInterval(-86400), until: now, marks: []),
            now: now)
        #expect(html.contains("4 of 6 (2 left)") && html.contains("(no per-app budget: never opened, or the learned planner budgets the user)"))
        #expect(html.contains("in 10 min") && html.contains("predictedOpen") && html.contains("&lt;around&gt;"))
        #expect(html.components(separatedBy: "<tr class=\"app\"").count - 1 == 2)
    }
}
