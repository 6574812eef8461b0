import BackgroundDaemon
import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

// Issue 17's soak: months of work in minutes. A real bgd (the whole Daemon, in this process, on
// a real SQLite file, serving its socket) lives through DAYS days on a virtual clock while the
// work its services record goes through the store's own write paths: runs with their events,
// pushes queued and then coalesced or expired as the dispatcher settles them, transfers that
// end with session events the app acknowledges, opens. bgd's own pruner keeps it bounded (the
// defaults: 30 days of history, a pass every 6 h). The same work goes into a second store that
// nobody prunes — the anchor, in the same run. At the end, `bgctl apps --json` against the
// soaked bgd, a real process each time.
//
// Usage: bgbench-soak [--days 90] [--apps 100] [--pushes 100000] [--runs 50000] [--transfers 5000] [--bgctl PATH]

struct Options {
    var days = 90, apps = 100, pushes = 100_000, runs = 50_000, transfers = 5_000
    var bgctl: String?

    init(_ arguments: [String]) {
        var rest = arguments[...]
        while let flag = rest.popFirst() {
            guard let value = rest.popFirst() else { Self.usage("\(flag) needs a value") }
            switch flag {
            case "--days": days = Self.count(value, flag)
            case "--apps": apps = Self.count(value, flag)
            case "--pushes": pushes = Self.count(value, flag)
            case "--runs": runs = Self.count(value, flag)
            case "--transfers": transfers = Self.count(value, flag)
            case "--bgctl": bgctl = value
            default: Self.usage("unknown option \(flag)")
            }
        }
    }

    static func count(_ value: String, _ flag: String) -> Int {
        guard let number = Int(value), number > 0 else { usage("\(flag) takes a positive whole number, not '\(value)'") }
        return number
    }

    static func usage(_ problem: String) -> Never {
        FileHandle.standardError.write(
            Data(
                "bgbench-soak: \(problem)\nusage: bgbench-soak [--days N] [--apps N] [--pushes N] [--runs N] [--transfers N] [--bgctl PATH]\n"
                    .utf8))
        exit(64)
    }
}

/// One day's share of the work, spread over its 24 hours, into one store.
struct Workload {
    let apps: [AppID]
    let perDay: (runs: Int, pushes: Int, transfers: Int)

    func hour(_ hour: Int, of day: Int, into store: BackgroundStore, at now: Date) async throws {
        func share(_ total: Int) -> Range<Int> { (total * hour / 24)..<(total * (hour + 1) / 24) }
        // Runs: each starts (with its event) and ends (settling it), as the coordinator records them.
        for index in share(perDay.runs) {
            let app = apps[(day * 7 + index) % apps.count]
            let started = now.addingTimeInterval(Double(index % 60) * 30)
            let run = try await store.startRun(
                .fetch, for: app, trigger: .scheduled, reasons: [], budget: .seconds(30), now: started)
            _ = try await store.finishRun(
                run.id, outcome: index % 5 == 0 ? .noData : .newData, now: started.addingTimeInterval(3))
        }
        // Pushes: queued as they come (one batch an hour), then settled every six hours as the
        // dispatcher does for an app that was not woken: the newest stands for the rest
        // (coalesced, the others replaced), and it expires undelivered.
        try await store.enqueuePushes(
            share(perDay.pushes).map { number in
                NewPush(
                    app: apps[number % apps.count], apnsID: UUID().uuidString.lowercased(), pushType: "background",
                    priority: 5, collapseID: nil, expiration: now.addingTimeInterval(3600),
                    payload: Data(#"{"n":\#(number)}"#.utf8))
            }, now: now)
        if hour % 6 == 5 {
            for app in apps {
                if let newest = try await store.coalesceQueuedPushes(of: app) {
                    try await store.dropPush(newest.id, reason: DecisionReason(.pushExpired, "soak: expired undelivered"))
                }
            }
        }
        // Transfers: handed over, ended, their session events acknowledged by the app.
        for index in share(perDay.transfers) {
            let app = apps[index % apps.count]
            let request = TransferRequest(
                session: "soak", url: URL(string: "https://example.com/soak/\(day)/\(index)")!)
            let transfer = try await store.createTransfer(request, app: app, now: now) { id in
                (partial: "/nonexistent/soak/\(id).partial", destination: nil)
            }
            _ = try await store.finishTransfer(
                transfer.record.id, index % 10 == 0 ? .cancelled : .completed(location: nil, statusCode: 200),
                now: now.addingTimeInterval(60))
            let last = try await store.lastEventSequence(for: app)
            _ = try await store.acknowledge(upTo: last, for: app, now: now.addingTimeInterval(61))
        }
        // A few opens an hour.
        for index in 0..<3 { try await store.recordOpen(of: apps[(hour * 3 + index + day) % apps.count], at: now) }
    }
}

/// posix_spawn and waitpid, output to /dev/null: Foundation's `Process.waitUntilExit` polls its
/// run loop every 50 ms on Linux, which would be the figure instead of bgctl's time.
func spawnAndWait(_ path: String, _ arguments: [String]) -> Int32 {
    var actions = posix_spawn_file_actions_t()
    posix_spawn_file_actions_init(&actions)
    defer { posix_spawn_file_actions_destroy(&actions) }
    posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
    let argv = ([path] + arguments).map { strdup($0) } + [nil]
    defer { for pointer in argv { free(pointer) } }
    var pid: pid_t = 0
    guard posix_spawn(&pid, path, &actions, nil, argv, environ) == 0 else { return -1 }
    var status: Int32 = 0
    while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
    return (status >> 8) & 0xff
}

func fileSize(_ path: String) -> Int64 {
    [path, path + "-wal"].reduce(0) { total, file in
        total + ((try? FileManager.default.attributesOfItem(atPath: file)[.size] as? Int64) ?? 0)
    }
}

func residentMegabytes() -> Double {
    let status = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    let line = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }
    let kilobytes = line.flatMap { Double($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
    return kilobytes / 1024
}

/// A line of output at once (print's buffer would hold the progress back when it goes to a file).
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }

func pad(_ text: String, _ width: Int) -> String { String(repeating: " ", count: max(0, width - text.count)) + text }

func megabytes(_ bytes: Int64) -> String { String(format: "%.1f", Double(bytes) / 1_048_576) }

let options = Options(Array(CommandLine.arguments.dropFirst()))
let start = Date(timeIntervalSince1970: 1_767_225_600)  // 2026-01-01, a Thursday
let directory = TemporaryDirectory.make()
defer { try? FileManager.default.removeItem(atPath: directory) }

try await TestDaemon.with(clock: ManualClock(now: start), directory: directory, appCgroups: false) { daemon in
    let apps = (0..<options.apps).map { AppID(rawValue: "com.example.soak\($0)")! }
    let control = try BackgroundStore.open(atPath: directory + "/unpruned.sqlite", durability: .normal)
    for app in apps {
        try await daemon.register(app.rawValue, command: ["/bin/true"], interval: .never)
        _ = try await control.register(
            RegisterAppRequest(id: app, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .never),
            tokenHash: "soak-\(app)", now: start)
    }
    let workload = Workload(
        apps: apps,
        perDay: (
            options.runs / options.days, options.pushes / options.days, max(1, options.transfers / options.days)
        ))
    let database = daemon.daemon.configuration.stateDirectory + "/bgd.sqlite"
    say(
        "soak: \(options.apps) apps, \(options.days) days; a day brings \(workload.perDay.runs) runs, \(workload.perDay.pushes) pushes, \(workload.perDay.transfers) transfers"
    )
    say("day   bgd file (MB)   unpruned (MB)   bgd RSS (MB)   elapsed (s)")
    let began = ContinuousClock.now
    for day in 0..<options.days {
        for hour in 0..<24 {
            let now = daemon.clock.now
            try await workload.hour(hour, of: day, into: daemon.store, at: now)
            try await workload.hour(hour, of: day, into: control, at: now)
            if hour % 6 == 5 {
                // Six hours on: the pruner's own timer fires; wait for its pass to end.
                _ = try await daemon.waitFor(
                    { if case .historyPruned = $0 { return true } else { return nil } },
                    after: { daemon.clock.advance(by: .seconds(3600)) })
            } else {
                daemon.clock.advance(by: .seconds(3600))
            }
        }
        if day % 10 == 9 || day == 0 || day == options.days - 1 {
            let elapsed = (ContinuousClock.now - began).components.seconds
            say(
                [
                    pad("\(day + 1)", 3), pad(megabytes(fileSize(database)), 15),
                    pad(megabytes(fileSize(directory + "/unpruned.sqlite")), 15),
                    pad(String(format: "%.1f", residentMegabytes()), 14), pad("\(elapsed)", 13),
                ].joined())
        }
    }
    #if DEBUG
        say("(a debug build: RSS and times are not the release figures)")
    #endif
    // bgctl against the soaked bgd: 100 listings, each a fresh process.
    guard let bgctl = options.bgctl else { return }
    var times: [Double] = []
    for _ in 0..<100 {
        let before = ContinuousClock.now
        let status = spawnAndWait(bgctl, ["apps", "--json", "--socket", daemon.socketPath])
        let took = ContinuousClock.now - before
        guard status == 0 else {
            throw CocoaError(.executableLoad, userInfo: [NSLocalizedDescriptionKey: "bgctl apps --json exited \(status)"])
        }
        times.append(Double(took.components.attoseconds) / 1e15 + Double(took.components.seconds) * 1000)
    }
    times.sort()
    say(
        String(
            format: "bgctl apps --json after the soak (%d apps, 100 runs): p50 %.1f ms, p99 %.1f ms", options.apps,
            times[49], times[98]))
}
