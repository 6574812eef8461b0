import ArgumentParser
import Background
import BackgroundModel
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

extension BGCtl {
    struct Download: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "download",
            abstract: "Hand a download to bgd and watch it: it survives this command, bgd and network faults.",
            discussion: """
                Without --app the file is the operator's: it goes to --to (default: the URL's file name in the
                current directory). With --app it belongs to the app, which is launched to receive it.
                Ctrl-C stops watching, not the download: `bgctl transfers cancel ID` stops that.
                A host that does not resolve, refuses or cannot be reached fails the download at once
                (as curl does); --retry-forever (or --no-wait) leaves it to bgd, which retries with
                backoff until the host answers. Once bytes flow, an interrupted download is resumed
                either way.
                """)
        @OptionGroup var options: DaemonOptions
        @Argument(help: "An http or https URL.") var url: String
        @Option(help: "Give the file to this app (it gets didFinishDownloadingTo).", transform: parseAppID) var app:
            AppID?
        @Option(
            help:
                "Where to put the file (operator downloads): a file name, or a directory (an existing one, or one written with a trailing /) to put it in under the URL's name."
        )
        var to: String?
        @Option(help: "Expected SHA-256 (hex): a mismatch fails the download.") var sha256: String?
        @Option(
            help:
                "The app's background session identifier, for --app downloads: the app hears of the download when it opens that session (the one it made with BackgroundURLSessionConfiguration.background(withIdentifier:)). Default: the one session of the app's transfers bgd knows, else 'bgctl'."
        )
        var session: String?
        @Flag(help: "Return once bgd has the download; do not watch it (bgd retries until the host answers).")
        var noWait = false
        @Flag(help: "If the host cannot be reached, let bgd retry with backoff instead of failing now.")
        var retryForever = false

        func validate() throws {
            if let problem = ServerURL.problem(with: url) { throw ValidationError("'\(url)' \(problem)") }
            if let to, to.isEmpty {
                throw ValidationError("--to is a file's path; leave it out to name the file after the URL")
            }
            if app != nil && to != nil {
                throw ValidationError("--to is for operator downloads; an app's download lands in its container")
            }
            if app == nil && session != nil {
                throw ValidationError("--session goes with --app: it names the app's background session")
            }
            if let sha256, !HexDigits.matches(sha256, length: 64...64) {
                throw ValidationError("--sha256 is 64 hexadecimal digits, not '\(sha256)'")
            }
        }

        func run() async throws {
            let source = URL(string: url)!
            var destination: String?
            if app == nil {
                let name =
                    source.lastPathComponent.isEmpty || source.lastPathComponent == "/"
                    ? "download" : source.lastPathComponent
                var path = to ?? FileManager.default.currentDirectoryPath + "/" + name
                // A directory, as cp and curl --output-dir take one: the file goes in it under
                // the URL's name (a trailing slash says "directory" even before it exists).
                var isDirectory: ObjCBool = false
                if path.hasSuffix("/")
                    || (FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory)
                        && isDirectory.boolValue)
                {
                    path = (path.hasSuffix("/") ? path : path + "/") + name
                }
                destination = URL(fileURLWithPath: path).standardizedFileURL.path
            }
            let request = TransferRequest(
                session: try await session(for: app), url: source, sha256: sha256?.lowercased(),
                destination: destination,
                waitsForConnectivity: retryForever || noWait)
            let query = app.map { "?app=\($0)" } ?? ""
            let record = try await options.call {
                try await $0.send(.post, "/v1/transfers\(query)", body: request, as: TransferRecord.self)
            }
            if noWait {
                if options.json { return try options.printJSON(record) }
                return print("Transfer \(record.id) handed to bgd. Watch it with: bgctl transfers")
            }
            if !options.json {
                // What is being fetched and where it goes, before the bar (as curl -v and aria2 say it).
                let target = record.destination ?? "\(record.app.map(\.rawValue) ?? "the app")'s container"
                FileHandle.standardError.write(
                    Data("Transfer \(record.id): \(record.url.absoluteString) → \(target)\n".utf8))
            }
            InterruptNotice.arm(transfer: record.id)
            let started = SystemClock().now
            let ended = try await watch(record)
            if options.json && ended.state == .completed { return try options.printJSON(ended) }
            switch ended.state {
            case .completed:
                let took = max(SystemClock().now.timeIntervalSince(started), 0.001)
                let size = ended.bytesReceived ?? ended.bytesTransferred
                print(
                    "Transfer \(ended.id) done: \(Self.bytes(size)) in \((took < 1 ? Duration.milliseconds(Int64((took * 1000).rounded(.up))) : Duration.seconds(took.rounded())).humanDescription), \(Self.bytes(Int64(Double(size) / took)))/s average → \(ended.destination ?? "handed to \(ended.app.map(\.rawValue) ?? "the app")")"
                )
            case .paused:
                // Paused by someone else (`bgctl transfers pause`, the app): not done, and no
                // longer moving, so no longer watched — before, the bar sat at 0 B/s for as long
                // as bgd kept it (30 days).
                options.fail(
                    "transferPaused",
                    "transfer \(ended.id) was paused; bgctl transfers resume \(ended.id) carries it on",
                    exit: BGCtlExit.transferFailed)
            default:
                let hint =
                    ended.error?.code == .cannotConnect
                    ? " (bgd keeps nothing; --retry-forever lets it retry until the host answers)" : ""
                options.fail(
                    "transfer\(ended.state.rawValue.prefix(1).uppercased())\(ended.state.rawValue.dropFirst())",
                    "transfer \(ended.id) \(ended.state.rawValue)\(Self.because(ended))\(hint)",
                    exit: BGCtlExit.transferFailed)
            }
        }

        /// The session the download goes to: `--session`; for an app, else the one session its
        /// transfers have used (an app hears of a download only in the session it opens), said
        /// on stderr; else "bgctl".
        private func session(for app: AppID?) async throws -> String {
            if let session { return session }
            guard let app else { return "bgctl" }
            let transfers = try await options.call {
                try await $0.send(.get, "/v1/transfers?limit=1000", as: [TransferRecord].self)
            }
            // "bgctl" is this command's own fallback, not a session the app chose.
            let sessions = Set(transfers.filter { $0.app == app && $0.session != "bgctl" }.map(\.session)).sorted()
            switch sessions.count {
            case 1:
                FileHandle.standardError.write(
                    Data("In \(app)'s background session \(sessions[0]) (--session for another)\n".utf8))
                return sessions[0]
            case 0:
                FileHandle.standardError.write(
                    Data(
                        "\(app) has no background session bgd knows of: the download goes to session 'bgctl', which the app must open to hear of it (--session ID for its own)\n"
                            .utf8))
                return "bgctl"
            default:
                options.fail(
                    "usage",
                    "\(app) uses several background sessions (\(sessions.joined(separator: ", "))): choose one with --session",
                    exit: BGCtlExit.usage)
            }
        }

        /// Redraws a progress bar (bytes, rate, ETA) on a terminal until the transfer ends or is
        /// paused.
        private func watch(_ record: TransferRecord) async throws -> TransferRecord {
            let isTerminal = isatty(STDERR_FILENO) == 1
            let clock = SystemClock()
            var rate = TransferRate()
            var current = record
            var unreachableSince: Date?
            while !current.state.isFinal && current.state != .paused {
                do {
                    current = try await options.client.send(
                        .get, "/v1/transfers/\(record.id)?wait=1", as: TransferRecord.self)
                    if unreachableSince != nil {
                        unreachableSince = nil
                        FileHandle.standardError.write(
                            Data("\r\u{1B}[Kbgd is back; watching transfer \(record.id) again\n".utf8))
                    }
                } catch let error as BackgroundError where error.isDaemonUnreachable || error.isDaemonUnresponsive {
                    // bgd restarting (or killed and started again) keeps the transfer: wait for it
                    // rather than tell the user the download is lost.
                    let now = clock.now
                    if unreachableSince == nil {
                        unreachableSince = now
                        FileHandle.standardError.write(
                            Data(
                                "\r\u{1B}[Kbgd is not answering; transfer \(record.id) carries on when it is back (waiting up to 2m; Ctrl-C leaves it to bgd)\n"
                                    .utf8))
                    }
                    if let since = unreachableSince, now.timeIntervalSince(since) > 120 {
                        options.fail(
                            "daemonUnreachable",
                            "bgd has not come back in 2m; transfer \(record.id) carries on once it does: bgctl transfers shows it",
                            exit: BGCtlExit.unreachable)
                    }
                    try await clock.sleep(for: .milliseconds(500))
                    continue
                } catch let error as BackgroundError {
                    options.fail(error)
                }
                let bytes = current.bytesReceived ?? current.bytesTransferred
                rate.record(bytes, at: clock.elapsed)
                if isTerminal && !options.json {
                    let line = Self.progressLine(
                        current, bytes: bytes, bytesPerSecond: rate.bytesPerSecond, width: TerminalWidth.columns())
                    FileHandle.standardError.write(Data(("\r\u{1B}[K" + line).utf8))
                }
            }
            if isTerminal && !options.json { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
            return current
        }

        /// One line that fits `width` columns: the bar takes what the figures leave, and a waiting
        /// transfer says why it waits (`retrying in 8s: connection refused`).
        static func progressLine(
            _ record: TransferRecord, bytes: Int64, bytesPerSecond rate: Double, width: Int = 80
        ) -> String {
            guard let total = record.bytesExpected, total > 0 else {
                // Running with nothing yet and no size known: still connecting (a transfer that
                // waits for connectivity keeps trying to connect for the connect timeout).
                let note =
                    record.state == .waiting
                    ? Self.waitingNote(record)
                    : record.isConnecting
                        ? "  connecting to \(record.url.host ?? "the host")…"
                        : "  \(record.state.rawValue)"
                return String("\(Self.bytes(bytes))  \(Self.bytes(Int64(rate)))/s\(note)".prefix(max(20, width - 1)))
            }
            let fraction = min(1, Double(bytes) / Double(total))
            let eta = rate > 0 ? Duration.seconds((Double(total - bytes) / rate).rounded()).humanDescription : "?"
            let figures =
                " \(Int(fraction * 100))%  \(Self.bytes(bytes)) / \(Self.bytes(total))  \(Self.bytes(Int64(rate)))/s  ETA \(eta)"
                + Self.waitingNote(record)
            let barWidth = max(10, min(60, width - figures.count - 3))
            let filled = Int(fraction * Double(barWidth))
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: barWidth - filled)
            return String(("[\(bar)]" + figures).prefix(max(20, width - 1)))
        }

        /// ": why" after a transfer's state — nothing when the error only names the state again
        /// (a cancelled transfer's error is `cancelled`: "cancelled: cancelled" says nothing more).
        static func because(_ record: TransferRecord) -> String {
            guard let error = record.error?.description, error != record.state.rawValue else { return "" }
            return ": \(error)"
        }

        /// Why a waiting transfer waits, and for how long when a retry is planned.
        static func waitingNote(_ record: TransferRecord) -> String {
            guard record.state == .waiting else { return "" }
            let why = record.error?.description ?? record.waitingReason ?? "waiting"
            if let next = record.nextAttemptAt {
                let left = max(0, next.timeIntervalSince(SystemClock().now))
                return "  (retrying in \(Duration.seconds(left.rounded(.up)).humanDescription): \(why))"
            }
            return "  (\(why))"
        }

        static func bytes(_ count: Int64) -> String { ByteCount.describe(count) }
    }

    struct Transfers: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "transfers",
            abstract: "List background transfers: state, progress, attempts, next retry and why.",
            subcommands: [List.self, Cancel.self, Pause.self, Resume.self, Retry.self], defaultSubcommand: List.self)

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "list",
                abstract: "List transfers, newest first.")
            @OptionGroup var options: DaemonOptions
            @Option(parsing: .unconditional, help: "At most this many, newest first (1 to 10000).") var limit: Int = 50

            func validate() throws { try checkCount(limit, "--limit", in: 1...10_000) }

            func run() async throws {
                if options.json { return try await options.printAnswer(.get, "/v1/transfers?limit=\(limit)") }
                let records = try await options.call {
                    try await $0.send(.get, "/v1/transfers?limit=\(limit)", as: [TransferRecord].self)
                }
                guard !records.isEmpty else { return print("No transfers. Start one with: bgctl download URL") }
                let now = SystemClock().now
                TextFormat.table(
                    header: ["ID", "APP", "STATE", "PROGRESS", "ATTEMPTS", "NEXT / WHY", "URL"],
                    rows: records.map { record in
                        let bytes = record.bytesReceived ?? record.bytesTransferred
                        let progress =
                            record.bytesExpected.map { "\(Download.bytes(bytes)) / \(Download.bytes($0))" }
                            ?? Download.bytes(bytes)
                        var why = record.error?.description ?? record.waitingReason ?? "-"
                        if let next = record.nextAttemptAt, record.state == .waiting {
                            why = "\(TextFormat.when(next, now: now)): \(why)"
                        }
                        return [
                            record.id.description, record.app?.rawValue ?? "-", record.stateDescription, progress,
                            "\(record.attempts)"
                                + (record.restarts > 0 ? " (\(TextFormat.count(record.restarts, "restart")))" : ""),
                            why,
                            record.url.absoluteString,
                        ]
                    })
            }
        }

        struct Pause: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "pause",
                abstract: "Pause a transfer, keeping its bytes (resume it with bgctl transfers resume ID).")
            @OptionGroup var options: DaemonOptions
            @Argument(help: "The transfer's id (bgctl transfers).") var id: Int64

            func run() async throws {
                let paused = try await options.call {
                    try await $0.send(.post, "/v1/transfers/\(id)/pause", as: TransferResumeData.self)
                }
                if options.json { return try options.printJSON(paused) }
                print(
                    "Transfer \(id) paused at \(Download.bytes(paused.bytesTransferred)); bgctl transfers resume \(id) goes on from there."
                )
            }
        }

        struct Resume: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "resume",
                abstract: "Resume a paused transfer from its bytes.")
            @OptionGroup var options: DaemonOptions
            @Argument(help: "The transfer's id (bgctl transfers).") var id: Int64

            func run() async throws {
                let record = try await options.call {
                    try await $0.send(.post, "/v1/transfers/\(id)/resume", as: TransferRecord.self)
                }
                if options.json { return try options.printJSON(record) }
                print(
                    "Transfer \(record.id): \(record.state.rawValue), from \(Download.bytes(record.bytesTransferred)).")
            }
        }

        struct Retry: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "retry",
                abstract: "Try a transfer again now.",
                discussion: """
                    A waiting or paused transfer goes at once, its retry time forgotten. A download of
                    yours (not an app's) that failed or was cancelled starts again as a new transfer of
                    the same URL and destination; its new id is printed.
                    """)
            @OptionGroup var options: DaemonOptions
            @Argument(help: "The transfer's id (bgctl transfers).") var id: Int64

            func run() async throws {
                let record = try await options.call {
                    try await $0.send(.post, "/v1/transfers/\(id)/retry", as: TransferRecord.self)
                }
                if options.json { return try options.printJSON(record) }
                if record.id.rawValue == id {
                    print("Transfer \(id): retrying now.")
                } else {
                    print("Transfer \(id) started again as transfer \(record.id). Watch it with: bgctl transfers")
                }
            }
        }

        struct Cancel: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "cancel",
                abstract: "Cancel a transfer; an app's hears `cancelled` once.")
            @OptionGroup var options: DaemonOptions
            @Argument(help: "The transfer's id (bgctl transfers).") var id: Int64

            func run() async throws {
                let record = try await options.call {
                    try await $0.send(.delete, "/v1/transfers/\(id)", as: TransferRecord.self)
                }
                // Cancelling one that had ended otherwise is a no-op for bgd (as for URLSession,
                // which an app relies on); to the operator it is a refusal, as pause, resume and
                // retry of it are — with --json too.
                guard record.state == .cancelled else {
                    options.fail(
                        "transferNotActive",
                        "transfer \(record.id) had already ended (\(record.state.rawValue)); nothing to cancel",
                        exit: BGCtlExit.refused)
                }
                if options.json { return try options.printJSON(record) }
                print("Transfer \(record.id): \(record.state.rawValue).")
            }
        }
    }
}

/// The terminal's width: the window's (TIOCGWINSZ on stderr), else `COLUMNS`, else 80.
enum TerminalWidth {
    static func columns() -> Int {
        var size = winsize()
        if ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        if let columns = ProcessInfo.processInfo.environment["COLUMNS"].flatMap(Int.init), columns > 0 {
            return columns
        }
        return 80
    }
}

/// Ctrl-C while `bgctl download` watches: the download is bgd's, not this command's — say so,
/// and how to stop it, then end as an interrupted command does (130).
enum InterruptNotice {
    nonisolated(unsafe) private static var message: [CChar] = []

    static func arm(transfer: TransferID) {
        message = Array(
            "\r\u{1B}[K\nbgctl: stopped watching; bgd goes on with transfer \(transfer) (bgctl transfers shows it, bgctl transfers cancel \(transfer) stops it)\n"
                .utf8CString)
        signal(SIGINT) { _ in
            // Only async-signal-safe calls here: write(2) and _exit(2).
            InterruptNotice.message.withUnsafeBufferPointer { _ = write(STDERR_FILENO, $0.baseAddress, $0.count - 1) }
            _exit(130)
        }
    }
}
