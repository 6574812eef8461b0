import BackgroundModel
import BackgroundProviderKeys
import Foundation

/// What an app declares about itself, as `Info.plist`'s `UIBackgroundModes` and
/// `BGTaskSchedulerPermittedIdentifiers` do on iOS: a small JSON file shipped with the app.
///
/// ```json
/// {
///   "id": "com.example.newsfeed",
///   "launch": ["bin/NewsFeed", "--background"],
///   "interval": "30m",
///   "taskIdentifiers": ["com.example.newsfeed.refresh"],
///   "pushTopic": "com.example.newsfeed"
/// }
/// ```
///
/// `launch` is argv (no shell); a relative program is taken from the manifest's directory.
/// `interval` is `never` (the default), `minimum` or a duration. `pushTopic`, when given, must be
/// the id: bgd's gateway takes an app's pushes on the topic of its id, as APNs does on the bundle id.
struct AppManifest: Equatable {
    var registration: RegisterAppRequest

    private struct File: Decodable {
        var id: String
        var launch: [String]
        var interval: String?
        var taskIdentifiers: [String]?
        var pushTopic: String?

        enum CodingKeys: String, CodingKey, CaseIterable { case id, launch, interval, taskIdentifiers, pushTopic }
    }

    /// Reads and checks the manifest at `path`; every problem is a sentence naming the field.
    /// A problem is the file's, not the command line's: `InputFileProblem`, shown without usage.
    static func load(_ path: String) throws(InputFileProblem) -> AppManifest {
        let data = try InputFile.contents(path)
        let object: Any
        do { object = try JSONSerialization.jsonObject(with: data) } catch {
            throw InputFileProblem(.malformed, "\(path) is not JSON: \(error.localizedDescription)")
        }
        guard let fields = object as? [String: Any] else { throw InputFileProblem(.malformed, "\(path): a JSON object is expected") }
        let known = Set(File.CodingKeys.allCases.map(\.rawValue))
        if let unknown = fields.keys.sorted().first(where: { !known.contains($0) }) {
            throw InputFileProblem(.malformed, 
                "\(path): unknown field '\(unknown)' (known: \(known.sorted().joined(separator: ", ")))")
        }
        let file: File
        do { file = try JSONDecoder().decode(File.self, from: data) } catch let DecodingError.keyNotFound(key, _) {
            throw InputFileProblem(.malformed, "\(path): '\(key.stringValue)' is required")
        } catch {
            throw InputFileProblem(.malformed, "\(path): a field has the wrong type (id: string, launch: [string], interval: string, taskIdentifiers: [string], pushTopic: string)")
        }
        guard let id = AppID(rawValue: file.id) else { throw InputFileProblem(.malformed, "\(path): id '\(file.id)': \(AppID.requirement)") }
        var argv = file.launch
        guard let program = argv.first, !program.isEmpty else {
            throw InputFileProblem(.malformed, "\(path): 'launch' needs the program, e.g. [\"bin/NewsFeed\"]")
        }
        if !program.hasPrefix("/") && program.contains("/") {
            let directory = URL(fileURLWithPath: path).deletingLastPathComponent()
            argv[0] = directory.appendingPathComponent(program).standardizedFileURL.path
        }
        guard let launch = LaunchCommand(argv) else { throw InputFileProblem(.malformed, "\(path): launch: \(LaunchCommand.requirement)") }
        var interval: FetchInterval?
        if let text = file.interval {
            guard let parsed = FetchInterval(parsing: text) else {
                throw InputFileProblem(.malformed, "\(path): interval '\(text)': \(FetchInterval.requirement)")
            }
            interval = parsed
        }
        for identifier in file.taskIdentifiers ?? [] where !TaskRequest.isValidIdentifier(identifier) {
            throw InputFileProblem(.malformed, "\(path): task identifier '\(identifier)': use 1 to 200 letters, digits, '.', '-' or '_'")
        }
        if let topic = file.pushTopic, topic != file.id {
            throw InputFileProblem(.malformed, "\(path): pushTopic '\(topic)' must be the app's id, \(file.id): pushes are taken on the id's topic")
        }
        return AppManifest(
            registration: RegisterAppRequest(
                id: id, launchCommand: launch, fetchInterval: interval ?? .never,
                taskIdentifiers: file.taskIdentifiers ?? []))
    }

    /// Whether `app` is already registered exactly as this manifest says.
    func matches(_ app: AppSummary) -> Bool {
        app.launchCommand == registration.launchCommand && app.fetchInterval == registration.fetchInterval
            && app.taskIdentifiers.sorted() == (registration.taskIdentifiers ?? []).sorted()
    }
}
