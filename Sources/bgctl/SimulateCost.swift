import BackgroundModel
import BackgroundPolicy
import Foundation

/// `bgctl simulate trace FILE --planning-cost`: what the learned planner costs bgd, per user of
/// the trace: rebuilding the model from stored opens (what bgd does at start) and one planning
/// pass (every app's next wake over the next 24 hours, as the Scheduler asks after each event).
struct PlanningCost: Encodable {
    struct User: Encodable {
        var user: String
        var apps: Int
        var opens: Int
        var days: Double
        var rebuildSeconds: Double
        var microsecondsPerAppPerPass: Double
    }

    var users: [User]

    static func measure(trace: AppOpenTrace, configuration: LearnedUsage.Configuration, passes: Int = 20) -> Self {
        let clock = ContinuousClock()
        var users: [User] = []
        for user in trace.users {
            let events = trace.events(of: user)
            guard let first = events.first, let last = events.last else { continue }
            let now = last.at.timeIntervalSince1970 + 1800
            var usage = LearnedUsage(configuration: configuration)
            let rebuild = clock.measure {
                usage = LearnedUsage.rebuilt(
                    configuration: configuration,
                    opens: events.lazy.map { (app: $0.app, at: $0.at.timeIntervalSince1970) }, now: now)
            }
            usage.adjust(at: now)
            let apps = usage.history.appsByName
            let planning = clock.measure {
                for _ in 0..<passes {
                    for app in apps {
                        _ = usage.nextWake(app, lastWake: nil, notBefore: now, until: now + 86400)
                    }
                }
            }
            users.append(
                User(
                    user: user, apps: apps.count, opens: events.count,
                    days: last.at.timeIntervalSince(first.at) / 86400, rebuildSeconds: rebuild.seconds,
                    microsecondsPerAppPerPass: planning.seconds * 1e6 / Double(passes * max(1, apps.count))))
        }
        return PlanningCost(users: users)
    }

    func printTable() {
        TextFormat.table(
            header: ["USER", "APPS", "OPENS", "DAYS", "REBUILD", "PLANNING PER APP PER PASS"],
            rows: users.map { user in
                [
                    user.user, "\(user.apps)", "\(user.opens)", String(format: "%.1f", user.days),
                    String(format: "%.2f s", user.rebuildSeconds),
                    String(format: "%.0f µs", user.microsecondsPerAppPerPass),
                ]
            })
    }
}
