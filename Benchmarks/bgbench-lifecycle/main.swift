import Background
import BackgroundModel
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

// Issues 6 and 14's benchmark (Benchmarks/lifecycle.sh runs it against a release bgd, once with
// apps in cgroups and once with signals):
//
// 1. Wake latency from a due event (`POST /v1/apps/ID/fetch`) to the app's fetch handler
//    running: a suspended app that bgd thaws (cgroup freezer) or continues (SIGCONT) vs a fresh
//    launch of the same code.
// 2. Precision of background time: how late the expiration handler runs after its due time
//    (deadline − lead), and how late an app that ignores it is ended after the deadline.
// 3. The CPU time bgd records for a run against the app's own in /proc/<pid>/stat over the same
//    run (a handler that burns about 200 ms).
//
// BENCH_ONLY=warm,cpu runs only those parts (the second pass).
//
// One process plays every part: `bgbench-lifecycle app …` is the foreground app,
// `bgbench-lifecycle launched` the process bgd launches, and without a mode it drives.
// Times cross processes as CLOCK_MONOTONIC nanoseconds (wake latency) or wall-clock seconds
// compared with bgd's deadlines (precision).

func monotonicNanoseconds() -> UInt64 {
    var now = timespec()
    clock_gettime(CLOCK_MONOTONIC, &now)
    return UInt64(now.tv_sec) * 1_000_000_000 + UInt64(now.tv_nsec)
}

func append(_ line: String, to path: String) {
    let fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o600)
    guard fd >= 0 else { return }
    defer { close(fd) }
    let bytes = Array((line + "\n").utf8)
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
}

func lines(_ path: String) -> [String] {
    ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
}

func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    guard !sorted.isEmpty else { return .nan }
    return sorted[min(sorted.count - 1, max(0, Int((Double(sorted.count) * p).rounded(.up)) - 1))]
}

func ms(_ value: Double) -> String { String(format: "%.1f ms", value) }

let arguments = Array(CommandLine.arguments.dropFirst())
let environment = ProcessInfo.processInfo.environment

switch arguments.first {
case "launched":
    // Launched by bgd for a fetch: log when the handler runs.
    // Its container: the only place a confined launched app may write.
    let application = try BackgroundApplication()
    let log = (application.containerPath ?? ".") + "/" + arguments[1]
    application.onBackgroundFetch {
        append("fetch \(monotonicNanoseconds())", to: log)
        return .noData
    }
    try await application.run()

case "app":
    // A foreground app: `app ID TOKEN SOCKET LOG MODE`; MODE `wake` leaves the foreground with
    // nothing to do (to be suspended); `expire`/`ignore` hold a background task and end it in
    // the expiration handler or not.
    let (id, token, socket, log, mode) = (arguments[1], arguments[2], arguments[3], arguments[4], arguments[5])
    let application = BackgroundApplication(appID: AppID(rawValue: id)!, token: token, socketPath: socket)
    application.onBackgroundFetch {
        append("fetch \(monotonicNanoseconds())", to: log)
        if mode == "busy" {
            // About 200 ms of CPU, measured by the process's own clock.
            func cpuNanoseconds() -> Int {
                var spent = timespec()
                clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &spent)
                return spent.tv_sec * 1_000_000_000 + spent.tv_nsec
            }
            let start = cpuNanoseconds()
            var counter: UInt64 = 0
            while cpuNanoseconds() - start < 200_000_000 || counter == 0 {
                for _ in 0..<100_000 { counter &+= 1 }
            }
        }
        return .noData
    }
    let connection = Task { try await application.run() }
    try await application.applicationDidBecomeActive()
    try await application.applicationDidEnterBackground()
    if mode != "wake" && mode != "busy" {
        let box = TaskBox()
        let task = await application.beginBackgroundTask(withName: "bench") {
            append("expired \(SystemClock().now.timeIntervalSince1970)", to: log)
            if mode == "expire" { Task { await application.endBackgroundTask(box.id) } }
        }
        box.id = task
        append("began", to: log)
    } else {
        append("background", to: log)
    }
    _ = try? await connection.value

default:
    try await Driver.run(arguments: arguments, environment: environment)
}

enum Driver {
    static func run(arguments: [String], environment: [String: String]) async throws {
        guard arguments.count >= 2 else { fatalError("usage: bgbench-lifecycle SOCKET WORKDIR [WAKES]") }
        let socket = arguments[0]
        let work = arguments[1]
        let wakes = arguments.count > 2 ? Int(arguments[2]) ?? 30 : 30
        let me =
            CommandLine.arguments[0].hasPrefix("/")
            ? CommandLine.arguments[0] : FileManager.default.currentDirectoryPath + "/" + CommandLine.arguments[0]
        let admin = DaemonClient(socketPath: socket)

        func register(_ id: String, command: [String]) async throws -> String {
            try await admin.send(
                .post, "/v1/apps",
                body: RegisterAppRequest(
                    id: AppID(rawValue: id)!, launchCommand: LaunchCommand(command)!, fetchInterval: .never),
                as: RegisteredApp.self
            ).token
        }
        func state(of id: String) async throws -> LifecycleStatus? {
            try await admin.send(.get, "/v1/apps", as: [AppSummary].self).first { $0.id.rawValue == id }?.lifecycle
        }
        func waitFor(_ what: String, _ condition: () async throws -> Bool) async throws {
            for _ in 0..<20_000 {
                if try await condition() { return }
                try await Task.sleep(for: .milliseconds(1))
            }
            fatalError("timed out waiting for \(what)")
        }
        func fetch(_ id: String) async throws -> UInt64 {
            let start = monotonicNanoseconds()
            _ = try await admin.send(.post, "/v1/apps/\(id)/fetch", as: RunRecord.self)
            return start
        }
        func startApp(_ id: String, token: String, log: String, mode: String) throws -> Process {
            let process = Process()
            // A session of its own and no terminal, as bgd would launch it: with signals, bgd
            // stops only such a process (cgroups freeze any).
            process.executableURL = URL(fileURLWithPath: "/usr/bin/setsid")
            process.arguments = [me, "app", id, token, socket, log, mode]
            try process.run()
            return process
        }
        let only = Set((environment["BENCH_ONLY"] ?? "warm,cold,precision,cpu").split(separator: ",").map(String.init))
        let status = try await admin.send(.get, "/v1/status", as: DaemonStatus.self)
        print("swift-background lifecycle — \(ProcessInfo.processInfo.activeProcessorCount) cores, \(wakes) wakes each")
        print("apps held by \(status.appProcesses ?? "?")")

        // 1. Warm wakes: one app, suspended between wakes.
        let warmID = "com.example.bench.warm"
        let warmLog = work + "/warm.log"
        let warmToken = try await register(warmID, command: ["/bin/false"])
        let warmApp = try startApp(warmID, token: warmToken, log: warmLog, mode: "wake")
        var warm: [Double] = []
        for index in stride(from: 1, through: only.contains("warm") ? wakes : 0, by: 1) {
            try await waitFor("suspension") { try await state(of: warmID)?.state == .suspended }
            let start = try await fetch(warmID)
            try await waitFor("the warm handler") { lines(warmLog).filter { $0.hasPrefix("fetch") }.count == index }
            let handled = UInt64(lines(warmLog).filter { $0.hasPrefix("fetch") }.last!.split(separator: " ")[1])!
            warm.append(Double(handled - start) / 1e6)
        }
        if let pid = try await state(of: warmID)?.processID { kill(pid, SIGKILL) }
        warmApp.terminate()

        // 3. CPU time per run: bgd's record against /proc/<pid>/stat for the same process.
        var recorded: [Double] = [], measured: [Double] = []
        if only.contains("cpu") {
            let busyID = "com.example.bench.busy"
            let busyLog = work + "/busy.log"
            let busyToken = try await register(busyID, command: ["/bin/false"])
            let busyApp = try startApp(busyID, token: busyToken, log: busyLog, mode: "busy")
            try await waitFor("the busy app") { try await state(of: busyID)?.processID != nil }
            let pid = try await state(of: busyID)!.processID!
            for _ in 1...10 {
                let before = procCPU(pid)
                let run = try await admin.send(.post, "/v1/apps/\(busyID)/fetch", as: RunRecord.self)
                var ended: RunRecord?
                try await waitFor("the busy run") {
                    ended = try await admin.send(.get, "/v1/apps/\(busyID)/history?limit=1", as: [RunRecord].self).first
                    { $0.id == run.id && !$0.isRunning }
                    return ended != nil
                }
                measured.append(Double(procCPU(pid) - before) / 1000)
                recorded.append(Double(ended?.cpuMicroseconds ?? 0) / 1000)
            }
            kill(pid, SIGKILL)
            busyApp.terminate()
        }

        // 2. Cold wakes: the same handler in a process bgd launches each time.
        let coldID = "com.example.bench.cold"
        _ = try await register(coldID, command: [me, "launched", "cold.log"])
        let coldLog =
            try await admin.send(.get, "/v1/apps", as: [AppSummary].self).first { $0.id.rawValue == coldID }!
            .containerPath! + "/cold.log"
        var cold: [Double] = []
        for index in stride(from: 1, through: only.contains("cold") ? wakes : 0, by: 1) {
            try await waitFor("the previous run to end") {
                try await admin.send(.get, "/v1/apps", as: [AppSummary].self).first { $0.id.rawValue == coldID }?
                    .lastRun?.isRunning != true
            }
            let start = try await fetch(coldID)
            try await waitFor("the cold handler") { lines(coldLog).count == index }
            let handled = UInt64(lines(coldLog).last!.split(separator: " ")[1])!
            cold.append(Double(handled - start) / 1e6)
        }

        // 3. Precision: expiration handlers against (deadline − lead), ends against the deadline.
        let lead = Double(environment["BENCH_EXPIRATION_LEAD"] ?? "0.5") ?? 0.5
        var expirationLateness: [Double] = []
        var endLateness: [Double] = []
        let rounds = only.contains("precision") ? max(5, wakes / 3) : 0
        for round in 0..<rounds {
            for mode in ["expire", "ignore"] {
                let id = "com.example.bench.\(mode)\(round)"
                let log = work + "/\(id).log"
                let token = try await register(id, command: ["/bin/false"])
                let app = try startApp(id, token: token, log: log, mode: mode)
                try await waitFor("its task") { lines(log).contains("began") }
                guard let deadline = try await state(of: id)?.deadline else { fatalError("no deadline for \(id)") }
                try await waitFor("the expiration handler") { lines(log).contains { $0.hasPrefix("expired") } }
                let expired = Double(lines(log).first { $0.hasPrefix("expired") }!.split(separator: " ")[1])!
                expirationLateness.append((expired - (deadline.timeIntervalSince1970 - lead)) * 1000)
                if mode == "ignore" {
                    app.waitUntilExit()
                    endLateness.append((SystemClock().now.timeIntervalSince(deadline)) * 1000)
                } else {
                    app.terminate()
                }
            }
        }

        let held = status.appProcesses?.hasPrefix("cgroups") == true ? "thawed (cgroup freezer)" : "continued (SIGCONT)"
        if !warm.isEmpty {
            print("wake latency, due event → fetch handler:")
            print(
                "  ours (suspended app \(held)): median \(ms(percentile(warm, 0.5))), p99 \(ms(percentile(warm, 0.99)))"
            )
        }
        if !cold.isEmpty {
            print(
                "  anchor (fresh launch of the same app, same run): median \(ms(percentile(cold, 0.5))), p99 \(ms(percentile(cold, 0.99)))"
            )
            print(
                "  warm is \(String(format: "%.1f", percentile(cold, 0.5) / percentile(warm, 0.5)))× faster at the median"
            )
        }
        if rounds > 0 {
            print("precision of background time (\(rounds) apps each):")
            print(
                "  expiration handler after its due time (deadline − lead): p50 \(ms(percentile(expirationLateness, 0.5))), p99 \(ms(percentile(expirationLateness, 0.99)))"
            )
            print(
                "  app that ignores it, ended (exit seen) after the deadline: p50 \(ms(percentile(endLateness, 0.5))), p99 \(ms(percentile(endLateness, 0.99)))"
            )
        }
        if !recorded.isEmpty {
            let ratios = zip(recorded, measured).map { $0 / max($1, 0.001) }
            print("CPU time per run (a handler burning ~200 ms, 10 runs):")
            print("  ours (recorded with the run): median \(ms(percentile(recorded, 0.5)))")
            print("  anchor (/proc/<pid>/stat utime+stime over the run): median \(ms(percentile(measured, 0.5)))")
            print(
                "  ratio ours/anchor: median \(String(format: "%.3f", percentile(ratios, 0.5))), min \(String(format: "%.3f", ratios.min() ?? .nan)), max \(String(format: "%.3f", ratios.max() ?? .nan))"
            )
        }
    }
}

/// A process's user + system CPU time from /proc, in microseconds (clock-tick resolution).
func procCPU(_ pid: Int32) -> UInt64 {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return 0 }
    let fields = stat[stat.index(after: close)...].split(separator: " ")
    guard fields.count > 12, let user = UInt64(fields[11]), let system = UInt64(fields[12]) else { return 0 }
    return (user + system) * 1_000_000 / UInt64(sysconf(Int32(_SC_CLK_TCK)))
}

/// The task's identifier, for the expiration handler that ends it.
final class TaskBox: Sendable {
    private let value = Mutex(BackgroundTaskIdentifier.invalid)
    var id: BackgroundTaskIdentifier {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}
