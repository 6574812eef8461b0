import Background
import Foundation

/// Seed 000's news app on swift-background.
///
/// Launched by bgd for a background fetch, it adds a news item about half the time and answers
/// `.newData` or `.noData`. Run by hand, it shows the list and reports the open; with `--watch`
/// it stays connected, so fetches come to it live and the list reloads, like the seed's table
/// view observing `allNewsItems`.
@main
struct NewsFeed {
    static func main() async {
        do {
            try await run(arguments: Array(CommandLine.arguments.dropFirst()))
        } catch {
            FileHandle.standardError.write(Data("NewsFeed: \(error)\n".utf8))
            exit(1)
        }
    }

    static let usage = """
        usage: NewsFeed [--watch] [--app ID]
          Launched by bgd: performs a background fetch.
          By hand: shows the news list and reports the open; --watch stays connected (Ctrl-C to
          quit). Its token comes from BGD_APP_TOKEN, else from its container (bgctl token APP).
        """

    static func run(arguments: [String]) async throws {
        let environment = ProcessInfo.processInfo.environment
        let probability = environment["NEWSFEED_NEW_DATA_PROBABILITY"].flatMap(Double.init) ?? 0.5
        if environment[LaunchEnvironment.reason] != nil {
            // Launched by bgd for background work.
            let application = try BackgroundApplication()
            let delegate = AppDelegate(
                store: try newsStore(in: application.containerPath), newDataProbability: probability)
            application.delegate = delegate
            try await application.run()
            return
        }

        var watch = false
        var appID = AppID(rawValue: "com.example.newsfeed")!
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            switch argument {
            case "--watch": watch = true
            case "--app":
                guard let value = remaining.popFirst(), let id = AppID(rawValue: value) else { throw UsageError(usage) }
                appID = id
            default: throw UsageError(usage)
            }
        }
        // The token `bgctl register` printed, or, with none given, the one bgd keeps in the app's
        // container for it (no copy-paste).
        let application =
            try environment[LaunchEnvironment.token].map { BackgroundApplication(appID: appID, token: $0) }
            ?? BackgroundApplication(appID: appID)
        let container = try await application.summary().containerPath
        let delegate = AppDelegate(store: try newsStore(in: container), newDataProbability: probability) { items in
            print("\u{1B}[2J\u{1B}[H", terminator: "")  // reloadData: clear and redraw
            show(items)
        }
        application.delegate = delegate
        try await application.applicationDidBecomeActive()
        try await application.setMinimumBackgroundFetchInterval(.minimum)
        show(delegate.allNewsItems)
        if watch {
            print("(watching for background fetches; Ctrl-C to quit)")
            try await application.run()
        }
    }

    static func newsStore(in container: String?) throws -> NewsStore {
        guard let container else { throw UsageError("bgd did not say where the app's directory is") }
        return NewsStore(url: URL(fileURLWithPath: container).appendingPathComponent("news.json"))
    }

    static func show(_ items: [NewsItem]) {
        print("News (\(items.count) item\(items.count == 1 ? "" : "s"))")
        for item in items.reversed() {
            print("  \(item.date.formatted(date: .abbreviated, time: .standard))  \(item.text)")
        }
    }
}

struct UsageError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
