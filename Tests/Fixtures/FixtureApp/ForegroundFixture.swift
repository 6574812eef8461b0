import Background
import BackgroundModel
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A foreground app for the lifecycle tests: the user "runs" it (the test starts it), it leaves
/// the foreground and asks for background time, then behaves per `mode`:
///
/// - `finish`: ends its task at once (well within its time).
/// - `cooperate`: holds the task; its expiration handler ends it.
/// - `ignore`: holds the task; its expiration handler does nothing.
/// - `idle`: asks for no time at all.
/// - `crash`: aborts while holding the task.
/// - `scoped`: `withBackgroundTime`, whose work waits for cancellation.
/// - `crash-on-fetch`: holds the task, as `ignore`; aborts in its fetch handler.
/// - `spin`: asks for no time, and burns CPU on a thread of its own (yielding between bursts):
///   a frozen app's CPU time stands still.
///
/// argv: `foreground APP TOKEN SOCKET LOG MODE`. Lines logged: `began <id>`, `ending <id>`,
/// `expire-task`, `cancelled`, `fetch`, `note <notification>`, `remaining <seconds|inf>`.
enum ForegroundFixture {
    static func main(_ arguments: [String]) async throws {
        guard arguments.count >= 6, let app = AppID(rawValue: arguments[1]) else {
            fatalError("usage: foreground APP TOKEN SOCKET LOG MODE")
        }
        let log = Log(path: arguments[4])
        let mode = arguments[5]
        let application = BackgroundApplication(appID: app, token: arguments[2], socketPath: arguments[3])
        application.onBackgroundFetch {
            log.append("fetch")
            if mode == "crash-on-fetch" { abort() }
            return .newData
        }
        let notes = application.lifecycleNotifications()
        Task { for await note in notes { log.append("note \(note.rawValue)") } }
        let connection = Task { try await application.run() }
        try await application.applicationDidBecomeActive()
        log.append("remaining \(application.backgroundTimeRemaining.isInfinite ? "inf" : "finite")")
        try await application.applicationDidEnterBackground()
        switch mode {
        case "idle":
            break
        case "spin":
            let thread = Thread {
                var counter: UInt64 = 0
                while true {
                    for _ in 0..<200_000 { counter &+= 1 }
                    if counter == 0 { print("wrapped") }
                    sched_yield()  // a turn for anyone else on the core between bursts
                }
            }
            thread.start()
        case "scoped":
            Task {
                do {
                    try await application.withBackgroundTime(named: "scoped") {
                        // Work that lasts until expiration cancels it.
                        await FixtureApp.waitForCancellation()
                        log.append("cancelled")  // before the time is given back (and the app suspended)
                        throw CancellationError()
                    }
                } catch {}
            }
        default:
            let box = TaskBox()
            let id = await application.beginBackgroundTask(withName: "save") {
                log.append("expire-task")
                if mode == "cooperate" {
                    log.append("ending \(box.id)")
                    Task { await application.endBackgroundTask(box.id) }
                }
            }
            box.id = id
            log.append("began \(id)")
            log.append("remaining \(application.backgroundTimeRemaining.isInfinite ? "inf" : "finite")")
            if mode == "finish" {
                log.append("ending \(id)")
                await application.endBackgroundTask(id)
            }
            if mode == "crash" { abort() }
        }
        _ = try? await connection.value
    }
}

/// The task's identifier, for the expiration handler that ends it.
final class TaskBox: @unchecked Sendable {
    private let lock = NSLock()
    private var value = BackgroundTaskIdentifier.invalid
    var id: BackgroundTaskIdentifier {
        get { lock.withLock { value } }
        set { lock.withLock { value = newValue } }
    }
}
