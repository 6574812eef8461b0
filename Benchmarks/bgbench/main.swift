import BackgroundModel
import BackgroundPolicy
import Foundation

// The scheduling benchmarks, in virtual time, each printing our figure beside its anchor from
// the same run. Run with: swift run -c release bgbench [--trace Traces/studentlife-dev.csv]
//
// BM12 (docs: ../shared/reference/performance.md): 10,000 fetches due at random over one hour,
// with a 60 s leeway: how many distinct wake-ups of the system the policy makes. Anchors:
// uncoalesced, one wake-up per distinct due time; systemd's AccuracySec=1min, one per minute.

struct SeededGenerator: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func coalescingBenchmark(fetches: Int, leeway: Duration) -> (wakeUps: Int, distinctDueTimes: Int, seconds: Double) {
    var random = SeededGenerator(state: 42)
    let start = Date(timeIntervalSince1970: 1_767_603_600)
    let interval = Duration.seconds(3600)
    var candidates = (0..<fetches).map { index in
        let due = start.addingTimeInterval(Double.random(in: 0..<3600, using: &random).rounded())
        return FetchCandidate(
            app: AppID(rawValue: "com.example.app\(index)")!, interval: .every(interval),
            registeredAt: start.addingTimeInterval(-86400),
            recentRuns: [.init(startedAt: due.addingTimeInterval(-3600), outcome: .newData)])
    }
    let distinct = Set(candidates.map { $0.recentRuns[0].startedAt }).count
    let policy = FetchPolicy(configuration: .init(maximumConcurrentRuns: fetches, coalescingLeeway: leeway))
    var now = start
    var wakeUps = 0
    let began = ContinuousClock.now
    while !candidates.isEmpty {
        let plan = policy.plan(for: candidates, runningCount: 0, now: now)
        if !plan.launch.isEmpty {
            wakeUps += 1
            let launched = Set(plan.launch)
            candidates.removeAll { launched.contains($0.app) }
        }
        guard let next = plan.nextEvaluation else { break }
        now = max(next, now)
    }
    let elapsed = ContinuousClock.now - began
    return (wakeUps, distinct, Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18)
}

func environmentLine() -> String {
    let cores = ProcessInfo.processInfo.activeProcessorCount
    return "nproc \(cores), \(ProcessInfo.processInfo.operatingSystemVersionString)"
}

print("swift-background scheduling benchmarks (\(environmentLine()))")
print("")
let bm12 = coalescingBenchmark(fetches: 10_000, leeway: .seconds(60))
print("BM12 wake coalescing: 10,000 fetches due at random over 1 h, 60 s leeway")
print("  ours:   \(bm12.wakeUps) wake-ups/h (planned in \(String(format: "%.1f", bm12.seconds)) s of CPU for the hour)")
print(
    "  anchor: \(bm12.distinctDueTimes) wake-ups/h uncoalesced (one per distinct due second); systemd AccuracySec=1min: 60/h"
)
print(
    "  ratio:  \(String(format: "%.1f", Double(bm12.distinctDueTimes) / Double(max(1, bm12.wakeUps))))× fewer than uncoalesced; target ≤ 60/h: \(bm12.wakeUps <= 60 ? "met" : "NOT met")"
)
