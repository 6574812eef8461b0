import Background
import Foundation
import Synchronization

/// Seed 001 on swift-background: a background fetch starts a background-session download; bgd
/// carries it even when the app has exited, then launches the app with reason url-session and
/// delivers `handleEventsForBackgroundURLSession` → `didFinishDownloadingTo` →
/// `didCompleteWithError` → `urlSessionDidFinishEvents`, where the completion handler stored
/// per session identifier is called. Success or failure is shown as a desktop notification
/// (`notify-send`) where one can be shown, a log line otherwise.
///
///     bgctl register com.example.downloads --interval minimum -- $BIN/DownloadManager --url http://…/AudioConverter.rar
///     bgctl simulate fetch com.example.downloads
@main
struct DownloadManager {
    static func main() async {
        do {
            let application = try BackgroundApplication()
            let url =
                argument("--url").flatMap(URL.init(string:))
                ?? ProcessInfo.processInfo.environment["DOWNLOADMANAGER_URL"].flatMap(URL.init(string:))
            let manager = BackgroundFetchManager(application: application)
            application.delegate = AppDelegate(manager: manager, url: url)
            try await application.run()
        } catch {
            FileHandle.standardError.write(
                Data("DownloadManager: \(error) (bgd launches this app; register it with bgctl)\n".utf8))
            exit(1)
        }
    }

    static func argument(_ name: String) -> String? {
        let arguments = CommandLine.arguments
        guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
        return arguments[index + 1]
    }
}

/// The seed's AppDelegate.
final class AppDelegate: BackgroundApplicationDelegate {
    let manager: BackgroundFetchManager
    let url: URL?
    init(manager: BackgroundFetchManager, url: URL?) {
        self.manager = manager
        self.url = url
    }

    func application(
        _ application: BackgroundApplication,
        performFetchWithCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void
    ) {
        guard let url else {
            LocalNotificationHelper.send(title: "backgroundSession~", body: "no --url to download")
            return completionHandler(.failed)
        }
        manager.backgroundFetchNewData(for: url, callBackCompletion: completionHandler)
    }

    func application(
        _ application: BackgroundApplication, handleEventsForBackgroundURLSession identifier: String,
        completionHandler: @escaping @Sendable () -> Void
    ) {
        print("?? handleEventsForBackgroundURLSession \(identifier)")
        LocalNotificationHelper.send(title: "backgroundSession~~", body: "下载完成 (download finished)")
        // The seed keeps the handler and calls it from didFinishEvents.
        manager.addFinishEventsForBackgroundSession(identifier: identifier, block: completionHandler)
    }
}

/// The seed's backgroundFetchManager: completion handlers by session identifier, and the session.
final class BackgroundFetchManager: BackgroundURLSessionDelegate {
    static let sessionIdentifier = "12345"
    private let handlers = Mutex<[String: @Sendable () -> Void]>([:])
    private let fetchCompletions = Mutex<[TransferID: @Sendable (BackgroundFetchResult) -> Void]>([:])
    private let application: BackgroundApplication
    private let libraryDirectory: URL
    private let session = Mutex<BackgroundURLSession?>(nil)

    init(application: BackgroundApplication) {
        self.application = application
        libraryDirectory = URL(fileURLWithPath: application.containerPath ?? FileManager.default.currentDirectoryPath)
            .appendingPathComponent("Library")
        session.withLock {
            $0 = BackgroundURLSession(
                configuration: .background(withIdentifier: Self.sessionIdentifier), delegate: self,
                application: application)
        }
    }

    func addFinishEventsForBackgroundSession(identifier: String, block: @escaping @Sendable () -> Void) {
        handlers.withLock { $0[identifier] = block }
    }

    /// Starts the download; the fetch answers when it ends, or bgd ends the fetch at its budget
    /// and the download carries on without the app.
    func backgroundFetchNewData(for url: URL, callBackCompletion: @escaping @Sendable (BackgroundFetchResult) -> Void) {
        guard let session = session.withLock({ $0 }) else { return callBackCompletion(.failed) }
        Task {
            do {
                let task = try await session.downloadTask(with: url, taskDescription: url.lastPathComponent)
                fetchCompletions.withLock { $0[task.taskIdentifier] = callBackCompletion }
            } catch {
                print("?? 下载失败 (download failed to start): \(error)")
                callBackCompletion(.failed)
            }
        }
    }

    func urlSession(
        _ session: BackgroundURLSession, downloadTask: BackgroundURLSessionTask, didFinishDownloadingTo location: URL
    ) {
        // destination: Library/<time of day>, as the seed names it.
        try? FileManager.default.createDirectory(at: libraryDirectory, withIntermediateDirectories: true)
        let file = libraryDirectory.appendingPathComponent(
            Date().formatted(.iso8601) + "-" + (downloadTask.taskDescription ?? "download"))
        try? FileManager.default.moveItem(at: location, to: file)
        print("?? 下载成功 (downloaded): \(file.path)")
    }

    func urlSession(
        _ session: BackgroundURLSession, task: BackgroundURLSessionTask, didCompleteWithError error: TransferError?
    ) {
        if let error {
            LocalNotificationHelper.send(title: "backgroundSession~", body: "下载失败 (download failed): \(error)")
        } else {
            LocalNotificationHelper.send(
                title: "backgroundSession~", body: "下载成功 (downloaded) \(task.taskDescription ?? "")")
        }
        let completion = fetchCompletions.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        completion?(error == nil ? .noData : .failed)  // the seed answers NoData on success
    }

    func urlSessionDidFinishEvents(forBackgroundURLSession session: BackgroundURLSession) {
        let identifier = session.configuration.identifier
        let block = handlers.withLock { $0.removeValue(forKey: identifier) }
        block?()
    }
}

/// The seed's LocalNotficationHelper: a desktop notification where one can be shown.
enum LocalNotificationHelper {
    static func send(title: String, body: String) {
        print("[\(title)] \(body)")
        guard
            ProcessInfo.processInfo.environment["DISPLAY"] != nil
                || ProcessInfo.processInfo.environment["WAYLAND_DISPLAY"] != nil,
            let notifySend = ["/usr/bin/notify-send", "/usr/local/bin/notify-send"].first(
                where: FileManager.default.isExecutableFile)
        else { return }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: notifySend)
        process.arguments = [title, body]
        try? process.run()
    }
}
