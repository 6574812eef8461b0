import Background
import Foundation
import Synchronization

/// Seed 002's "Delicious Food" list on swift-background, with the finite-length task of seed 004.
///
/// Launched by bgd for a background fetch (or its BGTaskScheduler refresh task), it inserts 0–4
/// random dishes and answers `.newData` or `.noData`. Run by hand it is the table view, driven
/// by lines on stdin:
///
/// - `refresh` — pull to refresh: 0–4 dishes now.
/// - `background` — leave the foreground: submit a refresh task request (`bgctl tasks run` runs
///   it now), `beginBackgroundTask` while the list is saved, then `endBackgroundTask` (bgd
///   suspends the app a few seconds later; an event resumes it).
///   `background slow`: the save outlasts the background time; the expiration handler ends it.
/// - `foreground` — come back: the list reloads from disk (what background fetches added while
///   away is highlighted), like seed 000 reloading on `willEnterForegroundNotification`.
/// - `list`, `quit`.
@main
struct DeliciousFood {
    static let refreshTask = "com.example.deliciousfood.refresh"

    static func main() async {
        do {
            try await run()
        } catch {
            FileHandle.standardError.write(Data("DeliciousFood: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        var generator = SystemRandomNumberGenerator()
        if environment[LaunchEnvironment.reason] != nil {
            // Launched by bgd: performFetchWithCompletionHandler → insertNewObjectForFetch.
            let application = try BackgroundApplication()
            let file = MenuFile(path: (application.containerPath ?? ".") + "/menu.json")
            application.onBackgroundFetch { try fetch(into: file) }
            application.taskScheduler.register(forTaskWithIdentifier: refreshTask) { task in
                task.setTaskCompleted(success: (try? fetch(into: file)) != nil)
            }
            try await application.run()
            return
        }

        // The token `bgctl register` printed, or the one bgd keeps in the app's container.
        let appID = AppID(rawValue: environment[LaunchEnvironment.appID] ?? "com.example.deliciousfood")!
        let application =
            try environment[LaunchEnvironment.token].map { BackgroundApplication(appID: appID, token: $0) }
            ?? BackgroundApplication(appID: appID)
        guard let container = try await application.summary().containerPath else {
            throw UsageError("bgd did not say where the app's container is")
        }
        let file = MenuFile(path: container + "/menu.json")
        // While the app runs, fetches and its refresh task come to it live (and resume it when
        // suspended): handlers are registered at launch, whoever launched it, as on iOS.
        application.onBackgroundFetch { try fetch(into: file) }
        application.taskScheduler.register(forTaskWithIdentifier: refreshTask) { task in
            task.setTaskCompleted(success: (try? fetch(into: file)) != nil)
        }
        let connection = Task { try await application.run() }
        try await application.applicationDidBecomeActive()
        var menu = file.load()
        print(menu.rendered())
        fflush(nil)
        menu.unseen = 0
        try file.save(menu)

        while let line = readLine() {
            switch line.trimmingCharacters(in: .whitespaces) {
            case "refresh":
                menu = file.load()
                let added = menu.insertNewDishes(using: &generator)
                try file.save(menu)
                print("\(added) new dishes fetched")
                print(menu.rendered())
                menu.unseen = 0
                try file.save(menu)
            case "background", "background slow":
                // applicationDidEnterBackground: ask for a refresh while away (Apple's
                // scheduleAppRefresh, at most one pending), then finish saving with time granted.
                try await application.applicationDidEnterBackground()
                try await application.taskScheduler.submit(AppRefreshTaskRequest(identifier: refreshTask))
                let slow = line.hasSuffix("slow")
                let ended = TaskEnd()
                let task = await application.beginBackgroundTask(withName: "save the menu") {
                    // A few seconds before the time is up: wrap up, or be ended instead of suspended.
                    print("expiring: saved what we had; ending the background task")
                    fflush(nil)
                    ended.finish()
                }
                guard task != .invalid else {
                    print("no background time: \(application.lastBackgroundTaskRefusal ?? "refused")")
                    break
                }
                try file.save(menu)
                print(
                    "saved \(menu.dishes.count) dishes (\(Int(application.backgroundTimeRemaining.rounded()))s of background time left)"
                )
                fflush(nil)
                // `background slow`: a save that takes longer than the time there is.
                if slow { await ended.wait() }
                await application.endBackgroundTask(task)
            case "foreground":
                try await application.applicationWillEnterForeground()
                try await application.applicationDidBecomeActive()
                menu = file.load()  // reloadData
                print(menu.rendered())
                menu.unseen = 0
                try file.save(menu)
            case "list":
                print(menu.rendered())
            case "quit":
                connection.cancel()
                return
            case "":
                continue
            default:
                print("commands: refresh, background, foreground, list, quit")
            }
            fflush(nil)  // stdout is a pipe in tests: show each answer at once
        }
        connection.cancel()
    }

    /// `insertNewObjectForFetchWithCompletionHandler`.
    static func fetch(into file: MenuFile) throws -> BackgroundFetchResult {
        var generator = SystemRandomNumberGenerator()
        var menu = file.load()
        let added = menu.insertNewDishes(using: &generator)
        try file.save(menu)
        print("\(added) new dishes fetched in the background")
        return added > 0 ? .newData : .noData
    }
}

/// Lets the expiration handler stop a slow save.
final class TaskEnd: Sendable {
    private let state = Mutex<(done: Bool, waiter: CheckedContinuation<Void, Never>?)>((false, nil))
    func finish() {
        state.withLock { state in
            state.done = true
            defer { state.waiter = nil }
            return state.waiter
        }?.resume()
    }
    func wait() async {
        await withCheckedContinuation { continuation in
            let done = state.withLock { state -> Bool in
                if state.done { return true }
                state.waiter = continuation
                return false
            }
            if done { continuation.resume() }
        }
    }
}

struct UsageError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
