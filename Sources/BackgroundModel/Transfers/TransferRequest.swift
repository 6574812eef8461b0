import Foundation

/// A transfer handed to bgd (`POST /v1/app/transfers`, or `/v1/transfers` by the operator).
public struct TransferRequest: Hashable, Codable, Sendable {
    /// The background session's identifier (`URLSessionConfiguration.background(withIdentifier:)`).
    public var session: String
    public var kind: TransferKind
    public var url: URL
    /// `URLSessionTask.taskDescription`: the app's own label, given back with every event.
    public var taskDescription: String?
    /// For uploads: the file to send. bgd copies it at submit, so the app may delete it.
    public var uploadFile: String?
    /// For uploads: POST (default) or PUT.
    public var httpMethod: String?
    /// Wait for good conditions (unmetered network, mains power) before starting.
    public var isDiscretionary: Bool
    /// May it run on a metered network?
    public var allowsExpensiveNetworkAccess: Bool
    /// Give up this long after submission (`timeoutIntervalForResource`, 7 days by default).
    public var timeoutForResource: Duration
    /// Do not start before this time (`earliestBeginDate`).
    public var earliestBegin: Date?
    /// Expected SHA-256 of the whole body, lowercase hex; a mismatch fails the download.
    public var sha256: String?
    /// Launch the app for this transfer's events when it is not running (default: yes).
    public var sessionSendsLaunchEvents: Bool
    /// Operator downloads only: where to put the file (absolute). App downloads land in the
    /// app's container and are offered to it in `didFinishDownloadingTo`.
    public var destination: String?
    /// Wait for a host that cannot be reached now (bgd's durable mode, as a background
    /// `URLSession`'s always do), or fail at once with `cannotConnect` — what someone watching a
    /// download at a terminal expects (`URLSessionConfiguration.waitsForConnectivity`).
    public var waitsForConnectivity: Bool

    public init(
        session: String, kind: TransferKind = .download, url: URL, taskDescription: String? = nil,
        uploadFile: String? = nil,
        httpMethod: String? = nil, isDiscretionary: Bool = false, allowsExpensiveNetworkAccess: Bool = true,
        timeoutForResource: Duration = .seconds(7 * 86400), earliestBegin: Date? = nil, sha256: String? = nil,
        sessionSendsLaunchEvents: Bool = true, destination: String? = nil, waitsForConnectivity: Bool = true
    ) {
        self.waitsForConnectivity = waitsForConnectivity
        self.sessionSendsLaunchEvents = sessionSendsLaunchEvents
        self.session = session
        self.kind = kind
        self.url = url
        self.taskDescription = taskDescription
        self.uploadFile = uploadFile
        self.httpMethod = httpMethod
        self.isDiscretionary = isDiscretionary
        self.allowsExpensiveNetworkAccess = allowsExpensiveNetworkAccess
        self.timeoutForResource = timeoutForResource
        self.earliestBegin = earliestBegin
        self.sha256 = sha256
        self.destination = destination
    }

    private enum CodingKeys: String, CodingKey {
        case session, kind, url, taskDescription, uploadFile, httpMethod, isDiscretionary, allowsExpensiveNetworkAccess
        case timeoutForResource, earliestBegin, sha256, sessionSendsLaunchEvents, destination, waitsForConnectivity
    }

    /// Optional fields take their defaults; `timeoutForResource` is in seconds on the wire.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        session = try c.decode(String.self, forKey: .session)
        kind = try c.decodeIfPresent(TransferKind.self, forKey: .kind) ?? .download
        url = try c.decode(URL.self, forKey: .url)
        taskDescription = try c.decodeIfPresent(String.self, forKey: .taskDescription)
        uploadFile = try c.decodeIfPresent(String.self, forKey: .uploadFile)
        httpMethod = try c.decodeIfPresent(String.self, forKey: .httpMethod)
        isDiscretionary = try c.decodeIfPresent(Bool.self, forKey: .isDiscretionary) ?? false
        allowsExpensiveNetworkAccess = try c.decodeIfPresent(Bool.self, forKey: .allowsExpensiveNetworkAccess) ?? true
        // Through WireSeconds: a number no Duration can hold (1e300) is a decoding error, not a trap.
        timeoutForResource =
            try c.decodeIfPresent(WireSeconds.self, forKey: .timeoutForResource)?.duration ?? .seconds(7 * 86400)
        earliestBegin = try c.decodeIfPresent(Date.self, forKey: .earliestBegin)
        sha256 = try c.decodeIfPresent(String.self, forKey: .sha256)
        sessionSendsLaunchEvents = try c.decodeIfPresent(Bool.self, forKey: .sessionSendsLaunchEvents) ?? true
        destination = try c.decodeIfPresent(String.self, forKey: .destination)
        waitsForConnectivity = try c.decodeIfPresent(Bool.self, forKey: .waitsForConnectivity) ?? true
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(session, forKey: .session)
        try c.encode(kind, forKey: .kind)
        try c.encode(url, forKey: .url)
        try c.encodeIfPresent(taskDescription, forKey: .taskDescription)
        try c.encodeIfPresent(uploadFile, forKey: .uploadFile)
        try c.encodeIfPresent(httpMethod, forKey: .httpMethod)
        try c.encode(isDiscretionary, forKey: .isDiscretionary)
        try c.encode(allowsExpensiveNetworkAccess, forKey: .allowsExpensiveNetworkAccess)
        try c.encode(timeoutForResource.seconds, forKey: .timeoutForResource)
        try c.encodeIfPresent(earliestBegin, forKey: .earliestBegin)
        try c.encodeIfPresent(sha256, forKey: .sha256)
        try c.encode(sessionSendsLaunchEvents, forKey: .sessionSendsLaunchEvents)
        try c.encodeIfPresent(destination, forKey: .destination)
        try c.encode(waitsForConnectivity, forKey: .waitsForConnectivity)
    }

    /// Why bgd cannot take this request, or nil. Checked before anything is stored.
    public var problem: String? {
        if session.isEmpty || session.utf8.count > 200 { return "'session' must be 1 to 200 bytes" }
        if let problem = PrintableText.problem(with: session, in: "session") { return problem }
        if let taskDescription, taskDescription.utf8.count > 1000 { return "'taskDescription' is at most 1000 bytes" }
        if let problem = ServerURL.problem(with: url) { return "'url' " + problem }
        switch kind {
        case .download:
            if uploadFile != nil { return "'uploadFile' is for uploads" }
        case .upload:
            guard let uploadFile, uploadFile.hasPrefix("/") else {
                return "an upload needs 'uploadFile', an absolute path"
            }
            if let httpMethod, !["POST", "PUT"].contains(httpMethod) { return "'httpMethod' is POST or PUT" }
        }
        if let sha256, !HexDigits.matches(sha256, length: 64...64) {
            return "'sha256' is 64 hex digits"
        }
        if !(timeoutForResource > .zero) { return "'timeoutForResource' must be positive" }
        if timeoutForResource > Self.longestTimeoutForResource {
            return "'timeoutForResource' is at most \(Int(Self.longestTimeoutForResource.seconds)) s (366 days)"
        }
        return nil
    }

    /// A transfer gives up after at most this long (iOS's default is 7 days).
    public static let longestTimeoutForResource: Duration = .seconds(366 * 86400)
}
