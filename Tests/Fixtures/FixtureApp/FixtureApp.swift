import Background
import Crypto
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// An app that misbehaves on purpose, for the daemon's tests. The behaviour is argv[1]:
///
/// - `newData`, `noData`, `failed`: answer that.
/// - `hang`: never answer, ignore cancellation; with `ignore-term` also ignore SIGTERM.
/// - `cooperate`: wait until expired (cancelled), then answer `.failed`, as a well-behaved app does.
/// - `crash`: abort in the middle of the fetch.
/// - `exit`: exit at once, before connecting.
/// - `linger`: answer `.newData`, then stay around after bgd says to exit.
/// - `hang-run N`: hang when launched for run N, answer `.newData` otherwise.
/// - `hang-push-once`: the first push's handler never answers (logged `push-start <id>`);
///   later ones answer `.newData`.
/// - `crash-on-download`: the first time a download is handed over, abort inside
///   `didFinishDownloadingTo` (before acknowledging); behave afterwards.
/// - `hang-on-download`: never return from `didFinishDownloadingTo`, so the download is never
///   acknowledged while the process lives.
/// - `die-before-download-ack`: the first time, kill itself (the library's failpoint
///   `event.afterHandOver`) once a download is handed over, before acknowledging it; behave
///   afterwards.
///
/// Every process has the background session "fixture"; its events are logged as
/// `handleEvents <session>`, `finished <transfer> <sha256 of the file>`, `completed <transfer> <ok|code>`,
/// `eventsFinished <session>`.
///
/// Every fetch and expiration is appended to `$BGD_CONTAINER/fixture.log` as `fetch <run>` /
/// `expire`, so tests can count what the app saw.
@main
struct FixtureApp {
    static func main() async throws {
        let behaviour = CommandLine.arguments.dropFirst().first ?? "newData"
        if behaviour == "foreground" {
            return try await ForegroundFixture.main(Array(CommandLine.arguments.dropFirst()))
        }
        if CommandLine.arguments.contains("ignore-term") { signal(SIGTERM, SIG_IGN) }
        if behaviour == "exit" { exit(0) }
        let application = try BackgroundApplication()
        let diedOnce = (application.containerPath ?? ".") + "/died-before-ack"
        if behaviour == "die-before-download-ack" && !FileManager.default.fileExists(atPath: diedOnce) {
            _ = FileManager.default.createFile(atPath: diedOnce, contents: nil)
            setenv("BGD_FAILPOINT", Failpoint.eventAfterHandOver.rawValue + ":once", 1)
        }
        let log = Log(path: (application.containerPath ?? ".") + "/fixture.log")
        let delegate = ExpirationRecorder(log: log)
        application.delegate = delegate
        let session = BackgroundURLSession(
            configuration: .background(withIdentifier: "fixture"),
            delegate: TransferRecorder(
                log: log, container: application.containerPath ?? ".", crashOnce: behaviour == "crash-on-download",
                hangs: behaviour == "hang-on-download"),
            application: application)
        _ = session
        // The run this process was launched for (BGD_RUN) is its first fetch; a later fetch is
        // another run bgd gave the process while it was still running (it lingers after a run
        // before exiting), logged `?` — the handler is not told which run it serves.
        let launchedFor = Mutex(ProcessInfo.processInfo.environment[LaunchEnvironment.run])
        application.onBackgroundFetch {
            let run = launchedFor.withLock { run in
                defer { run = nil }
                return run ?? "?"
            }
            log.append("fetch \(run) pid \(getpid())")
            switch behaviour {
            case "noData": return .noData
            case "failed": return .failed
            case "crash": abort()
            case "hang": await never()
            case "hang-run":
                if run == CommandLine.arguments.dropFirst(2).first { await never() }
                return .newData
            case "cooperate":
                await waitForCancellation()
                return .failed
            default: return .newData
            }
        }
        // BGTaskScheduler: any identifier the test registers the app with; `cooperate` waits for
        // expiration and then says it failed.
        for identifier in ["com.example.fixture.refresh", "com.example.fixture.processing"] {
            application.taskScheduler.register(forTaskWithIdentifier: identifier) { task in
                log.append("task \(task.identifier) \(task.kind.rawValue)")
                if behaviour == "cooperate" {
                    task.expirationHandler = {
                        log.append("task-expired \(task.identifier)")
                        task.setTaskCompleted(success: false)
                    }
                } else {
                    task.setTaskCompleted(success: true)
                }
            }
        }
        application.onRemoteNotification { notification in
            let id = (notification.userInfo["content-id"] as? NSNumber)?.intValue ?? -1
            let marker = (application.containerPath ?? ".") + "/push-hung-once"
            if behaviour == "hang-push-once" && !FileManager.default.fileExists(atPath: marker) {
                FileManager.default.createFile(atPath: marker, contents: nil)
                log.append("push-start \(id)")
                await never()
            }
            // Idempotent, as an app whose work is not must be: a push offered again (its run was
            // cut short after this line, before the answer) is noted, not done twice.
            if let apnsID = notification.apnsID, log.contains("apns \(apnsID)") {
                log.append("push-again \(id)")
                return .newData
            }
            log.append("push \(id) apns \(notification.apnsID ?? "-")")
            return .newData
        }
        try await application.run()
        if behaviour == "linger" { await never() }
    }

    /// Suspends forever, deaf to cancellation.
    static func never() async -> Never {
        await withUnsafeContinuation { (_: UnsafeContinuation<Void, Never>) in }
        fatalError("unreachable")
    }

    static func waitForCancellation() async {
        let waiter = Mutex<CheckedContinuation<Void, Never>?>(nil)
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                // Checked under the lock, so a cancellation racing this store is never lost.
                let cancelled = waiter.withLock { waiter in
                    if Task.isCancelled { return true }
                    waiter = continuation
                    return false
                }
                if cancelled { continuation.resume() }
            }
        } onCancel: {
            waiter.withLock { $0.take() }?.resume()
        }
    }
}

final class ExpirationRecorder: BackgroundApplicationDelegate {
    let log: Log
    init(log: Log) { self.log = log }

    func application(
        _ application: BackgroundApplication,
        performFetchWithCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void
    ) { completionHandler(.noData) }

    func applicationBackgroundFetchWillExpire(_ application: BackgroundApplication) { log.append("expire") }

    func application(
        _ application: BackgroundApplication, handleEventsForBackgroundURLSession identifier: String,
        completionHandler: @escaping @Sendable () -> Void
    ) {
        log.append("handleEvents \(identifier)")
        completionHandler()
    }
}

final class TransferRecorder: BackgroundURLSessionDelegate {
    let log: Log
    let container: String
    let crashOnce: Bool
    let hangs: Bool
    init(log: Log, container: String, crashOnce: Bool, hangs: Bool) {
        self.log = log
        self.container = container
        self.crashOnce = crashOnce
        self.hangs = hangs
    }

    func urlSession(
        _ session: BackgroundURLSession, downloadTask: BackgroundURLSessionTask, didFinishDownloadingTo location: URL
    ) {
        let kept = URL(fileURLWithPath: container + "/kept-\(downloadTask.taskIdentifier)")
        try? FileManager.default.removeItem(at: kept)
        let digest = (try? Data(contentsOf: location)).map { FixtureDigest.sha256($0) } ?? "missing"
        log.append("finished \(downloadTask.taskIdentifier) \(digest)")
        let marker = container + "/crashed-once"
        if crashOnce && !FileManager.default.fileExists(atPath: marker) {
            FileManager.default.createFile(atPath: marker, contents: nil)
            abort()
        }
        // The delegate is synchronous: the thread that delivers events stops here for good.
        while hangs { pause() }
        try? FileManager.default.moveItem(at: location, to: kept)
    }

    func urlSession(
        _ session: BackgroundURLSession, task: BackgroundURLSessionTask, didCompleteWithError error: TransferError?
    ) {
        log.append("completed \(task.taskIdentifier) \(error?.code.rawValue ?? "ok")")
    }

    func urlSessionDidFinishEvents(forBackgroundURLSession session: BackgroundURLSession) {
        log.append("eventsFinished \(session.configuration.identifier)")
    }
}

final class Log: Sendable {
    let path: String
    init(path: String) { self.path = path }

    /// Whether a line of the log contains `text`.
    func contains(_ text: String) -> Bool {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").contains(text)
    }

    func append(_ line: String) {
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o600)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }
}

enum FixtureDigest {
    static func sha256(_ data: Data) -> String { SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined() }
}
