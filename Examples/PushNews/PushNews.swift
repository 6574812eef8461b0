import AsyncHTTPClient
import Background
import Foundation

/// Seed 004's silent push on swift-background: a background push carrying `content-id` makes
/// the app fetch that item and answer `.newData` — so the item is there when the user looks.
///
///     bgctl register com.example.pushnews --interval never -- $BIN/PushNews --url 'https://news.example/items/{id}'
///     $BIN/PushNews                            # registers for pushes, prints the token, lists items
///     bgctl push send com.example.pushnews payload.json --key … --key-id … --team-id …
///     # payload.json: {"aps":{"content-available":1},"content-id":42}
@main
struct PushNews {
    static func main() async {
        do {
            try await run()
        } catch {
            FileHandle.standardError.write(Data("PushNews: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run() async throws {
        let environment = ProcessInfo.processInfo.environment
        let template = argument("--url") ?? environment["PUSHNEWS_URL"]
        if environment[LaunchEnvironment.reason] != nil {
            // Woken by bgd for a push.
            let application = try BackgroundApplication()
            guard let container = application.containerPath else { throw PushNewsError("bgd gave no container") }
            application.delegate = AppDelegate(items: ItemStore(container: container), template: template)
            try await application.run()
            return
        }
        // The token `bgctl register` printed, or the one bgd keeps in the app's container.
        let appID = AppID(rawValue: argument("--app") ?? "com.example.pushnews")!
        let application =
            try environment[LaunchEnvironment.token].map { BackgroundApplication(appID: appID, token: $0) }
            ?? BackgroundApplication(appID: appID)
        let deviceToken = try await application.registerForRemoteNotifications()
        try await application.applicationDidBecomeActive()
        print("Device token: \(deviceToken)")
        guard let container = try await application.summary().containerPath else { return }
        let items = ItemStore(container: container).all()
        print(
            items.isEmpty
                ? "No items yet: they arrive with background pushes."
                : "Items fetched in the background: \(items.joined(separator: ", "))")
    }

    static func argument(_ name: String) -> String? {
        let arguments = CommandLine.arguments
        guard let index = arguments.firstIndex(of: name), index + 1 < arguments.count else { return nil }
        return arguments[index + 1]
    }
}

/// The seed's `application:didReceiveRemoteNotification:fetchCompletionHandler:`.
final class AppDelegate: BackgroundApplicationDelegate {
    let items: ItemStore
    let template: String?
    init(items: ItemStore, template: String?) {
        self.items = items
        self.template = template
    }

    func application(
        _ application: BackgroundApplication,
        performFetchWithCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void
    ) { completionHandler(.noData) }

    func application(
        _ application: BackgroundApplication, didReceiveRemoteNotification userInfo: RemoteNotification,
        fetchCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void
    ) {
        guard let contentID = (userInfo.userInfo["content-id"] as? NSNumber)?.intValue, let template,
            let url = URL(string: template.replacingOccurrences(of: "{id}", with: String(contentID)))
        else { return completionHandler(.noData) }
        let items = self.items
        Task {
            do {
                let response = try await HTTPClient.shared.execute(
                    HTTPClientRequest(url: url.absoluteString), timeout: .seconds(25))
                guard response.status == .ok else { return completionHandler(.failed) }
                let body = try await response.body.collect(upTo: 8 << 20)
                try items.save(Data(body.readableBytesView), id: contentID)
                completionHandler(.newData)
            } catch {
                completionHandler(.failed)
            }
        }
    }
}

/// Fetched items, one file each in the app's container.
struct ItemStore: Sendable {
    let directory: URL
    init(container: String) { directory = URL(fileURLWithPath: container).appendingPathComponent("items") }

    func save(_ data: Data, id: Int) throws {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try data.write(to: directory.appendingPathComponent("\(id)"), options: .atomic)
    }

    func all() -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted() }
}

struct PushNewsError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
