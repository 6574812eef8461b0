import AsyncHTTPClient
import Background
import Foundation

/// Seed 004's background-fetch demo on swift-background: each background fetch downloads an
/// image, saves it in the app's Documents directory and bumps the badge; opening the app shows
/// the image's path and the badge.
///
///     bgctl register com.example.imagefetch --interval minimum -- $BIN/ImageFetch --url http://…/cat.jpg
///     bgctl simulate fetch com.example.imagefetch
///     $BIN/ImageFetch                            # shows the image and the badge, then clears it
@main
struct ImageFetch {
    static func main() async {
        do {
            try await run(arguments: Array(CommandLine.arguments.dropFirst()))
        } catch {
            FileHandle.standardError.write(Data("ImageFetch: \(error)\n".utf8))
            exit(1)
        }
    }

    static func run(arguments: [String]) async throws {
        let environment = ProcessInfo.processInfo.environment
        var imageURL = environment["IMAGEFETCH_URL"].flatMap(URL.init(string:))
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            guard argument == "--url", let value = remaining.popFirst(), let url = URL(string: value) else {
                throw ExampleError("usage: ImageFetch [--url URL]   (or IMAGEFETCH_URL)")
            }
            imageURL = url
        }
        if environment[LaunchEnvironment.reason] != nil {
            // didFinishLaunchingWithOptions: bgd launched us for a background fetch.
            let application = try BackgroundApplication()
            guard let container = application.containerPath else { throw ExampleError("bgd gave no container") }
            guard let imageURL else {
                throw ExampleError("no image URL: register the app with `-- ImageFetch --url URL`")
            }
            let viewController = BackgroundFetchViewController(
                imageURL: imageURL, container: URL(fileURLWithPath: container))
            application.delegate = AppDelegate(mainViewController: viewController)
            try await application.run()
            return
        }
        // Opened by the user: show what the background fetches brought.
        // The token `bgctl register` printed, or the one bgd keeps in the app's container.
        let appID = AppID(rawValue: "com.example.imagefetch")!
        let application =
            try environment[LaunchEnvironment.token].map { BackgroundApplication(appID: appID, token: $0) }
            ?? BackgroundApplication(appID: appID)
        try await application.applicationDidBecomeActive()
        try await application.setMinimumBackgroundFetchInterval(.minimum)  // setMinimumBackgroundFetchInterval:Minimum
        guard let container = try await application.summary().containerPath else {
            throw ExampleError("bgd gave no container")
        }
        let viewController = BackgroundFetchViewController(
            imageURL: imageURL, container: URL(fileURLWithPath: container))
        viewController.show()
    }
}

/// The seed's AppDelegate: a fetch asks the view controller to fetch the image and bumps the badge.
final class AppDelegate: BackgroundApplicationDelegate {
    let mainViewController: BackgroundFetchViewController
    init(mainViewController: BackgroundFetchViewController) { self.mainViewController = mainViewController }

    func application(
        _ application: BackgroundApplication,
        performFetchWithCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void
    ) {
        mainViewController.initImageView(completionHandler: completionHandler)
        mainViewController.applicationIconBadgeNumber += 1  // "强迫症者慎用": the seed's badge
    }
}

/// The seed's BackgroundFetchViewController: download, copy into Documents, show.
final class BackgroundFetchViewController: Sendable {
    let imageURL: URL?
    let container: URL
    init(imageURL: URL?, container: URL) {
        self.imageURL = imageURL
        self.container = container
    }

    var documentsDirectory: URL { container.appendingPathComponent("Documents") }

    /// The badge, kept in the container so the foreground app can show it.
    var applicationIconBadgeNumber: Int {
        get {
            (try? String(contentsOf: container.appendingPathComponent("badge"), encoding: .utf8)).flatMap { Int($0) }
                ?? 0
        }
        set {
            try? String(newValue).write(
                to: container.appendingPathComponent("badge"), atomically: true, encoding: .utf8)
        }
    }

    func initImageView(completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void) {
        guard let imageURL else { return completionHandler(.failed) }
        Task {
            do {
                // defaultSessionConfiguration: an ordinary in-process request, within the fetch's budget.
                let response = try await HTTPClient.shared.execute(
                    HTTPClientRequest(url: imageURL.absoluteString), timeout: .seconds(25))
                guard response.status == .ok else { throw ExampleError("HTTP \(response.status.code)") }
                let body = try await response.body.collect(upTo: 64 << 20)
                let destination = createDirectoryForDownloadItem(from: imageURL)
                try Data(body.readableBytesView).write(to: destination, options: .atomic)  // copyTempFileAtURL:toDestination:
                print("Fetch image successful, \(destination.path)")
                completionHandler(.newData)
            } catch {
                print("Fetch data failed: \(error)")
                completionHandler(.failed)
            }
        }
    }

    func createDirectoryForDownloadItem(from location: URL) -> URL {
        try? FileManager.default.createDirectory(at: documentsDirectory, withIntermediateDirectories: true)
        let name = location.lastPathComponent.isEmpty ? "image" : location.lastPathComponent
        return documentsDirectory.appendingPathComponent(name)
    }

    /// showImageWithURL: a terminal has no image view; say where it is and how big.
    func show() {
        let files =
            (try? FileManager.default.contentsOfDirectory(
                at: documentsDirectory, includingPropertiesForKeys: [.fileSizeKey])) ?? []
        if let image = files.first {
            let size = (try? image.resourceValues(forKeys: [.fileSizeKey]).fileSize) ?? 0
            print("Image: \(image.path) (\(size) bytes)")
        } else {
            print(
                "No image yet: it arrives with the next background fetch (bgctl simulate fetch com.example.imagefetch)."
            )
        }
        print("Badge: \(applicationIconBadgeNumber) background fetch(es) since you last looked")
        applicationIconBadgeNumber = 0
    }
}

struct ExampleError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
