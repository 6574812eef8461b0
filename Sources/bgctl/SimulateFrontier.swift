import BackgroundModel
import BackgroundPolicy
import Foundation

/// `bgctl simulate trace FILE --frontier`: every planner at every budget, beside the oracle.
struct FrontierReport: Encodable {
    struct Row: Encodable {
        var planner: String
        var wakesPerOpen: Double
        var wakesPerUserDay: Double
        var timesOracle: Double
        var fresh15: Double
        var fresh60: Double
        var medianAgeMinutes: Double
        var p90AgeMinutes: Double
    }
    static let budgets = [0.5, 1, 1.5, 2, 3, 4]
    /// What a frontier can run: the planners under the online budget, and bgd's older planner.
    static let plannerNames = FrontierReplay.Planner.allCases.map(\.rawValue) + ["adaptive"]

    var oracleWakesPerUserDay: Double
    var rows: [Row]

    /// Replays every planner at every budget; `progress` hears each step (it takes a while).
    static func make(
        trace: AppOpenTrace, adaptive: TraceReplay, frontier: FrontierReplay, budgets: [Double] = budgets,
        planners names: [String] = plannerNames, progress: (String) -> Void
    ) -> FrontierReport {
        let planners = FrontierReplay.Planner.allCases.filter { names.contains($0.rawValue) }
        let oracle = FreshnessScore.strict(trace: trace, wakes: adaptive.wakes(for: trace, policy: .oracle))
        var rows: [Row] = []
        func row(_ planner: String, _ k: Double, _ score: FreshnessScore) -> Row {
            Row(
                planner: planner, wakesPerOpen: k, wakesPerUserDay: score.wakesPerUserDay,
                timesOracle: oracle.wakesPerUserDay == 0 ? 0 : score.wakesPerUserDay / oracle.wakesPerUserDay,
                fresh15: score.freshWithin15Minutes, fresh60: score.freshWithin60Minutes,
                medianAgeMinutes: score.medianAge.seconds / 60, p90AgeMinutes: score.p90Age.seconds / 60)
        }
        // One walk per planner serves every budget (`FrontierReplay.wakes(for:planner:budgets:)`).
        var scores: [FrontierReplay.Planner: [FreshnessScore]] = [:]
        for planner in planners {
            progress("\(planner.rawValue) at \(budgets.map { "\($0)×" }.joined(separator: ", ")) …")
            scores[planner] = frontier.wakes(for: trace, planner: planner, budgets: budgets).map {
                FreshnessScore.strict(trace: trace, wakes: $0)
            }
        }
        for (index, k) in budgets.enumerated() {
            for planner in planners {
                rows.append(row(planner.rawValue, k, scores[planner]![index]))
            }
            guard names.contains("adaptive") else { continue }
            progress("adaptive at \(k)× …")
            var budgeted = adaptive
            budgeted.planner.wakesPerOpen = k
            rows.append(
                row(
                    "adaptive", k,
                    FreshnessScore.strict(trace: trace, wakes: budgeted.wakes(for: trace, policy: .adaptive))))
        }
        return FrontierReport(oracleWakesPerUserDay: oracle.wakesPerUserDay, rows: rows)
    }

    func printTable() {
        print(String(format: "oracle: %.1f wakes per user-day", oracleWakesPerUserDay))
        TextFormat.table(
            header: [
                "K", "PLANNER", "WAKES/USER-DAY", "× ORACLE", "FRESH ≤15M", "FRESH ≤60M", "MEDIAN AGE", "P90 AGE",
            ],
            rows: rows.map { row in
                [
                    String(format: "%.1f", row.wakesPerOpen), row.planner, String(format: "%.1f", row.wakesPerUserDay),
                    String(format: "%.2f", row.timesOracle), String(format: "%.3f", row.fresh15),
                    String(format: "%.3f", row.fresh60), String(format: "%.0f min", row.medianAgeMinutes),
                    String(format: "%.0f min", row.p90AgeMinutes),
                ]
            })
    }
}
