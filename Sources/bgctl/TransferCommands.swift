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
            abstract: "Hand a download to bgd and watch it: it survives this command, bgd and network faults.",
            discussion: """
                Without --app the file is the operator's: it goes to --to (default: the URL's file name in the
                current directory). With --app it belongs to the app, which is launched to receive it.
                Ctrl-C stops watching, not the download: `bgctl transfers cancel ID` stops that.
                """)
        @OptionGroup var options: DaemonOptions
        @Argument(help: "An http or https URL.") var url: String
        @Option(help: "Give the file to this app (it gets didFinishDownloadingTo).", transform: parseAppID) var app:
            AppID?
        @Option(help: "Where to put the file (operator downloads).") var to: String?
        @Option(help: "Expected SHA-256 (hex): a mismatch fails the download.") var sha256: String?
        @Option(help: "The session identifier, for --app downloads.") var session: String = "bgctl"
        @Flag(help: "Return once bgd has the download; do not watch it.") var noWait = false

        func validate() throws {
            guard let parsed = URL(string: url), ["http", "https"].contains(parsed.scheme?.lowercased() ?? ""),
                parsed.host != nil
            else {
                throw ValidationError("'\(url)' is not an http or https URL")
            }
            if app != nil && to != nil {
                throw ValidationError("--to is for operator downloads; an app's download lands in its container")
            }
        }

        func run() async throws {
            let source = URL(string: url)!
            var destination: String?
            if app == nil {
                let name =
                    source.lastPathComponent.isEmpty || source.lastPathComponent == "/"
                    ? "download" : source.lastPathComponent
                let path = to ?? FileManager.default.currentDirectoryPath + "/" + name
                destination = URL(fileURLWithPath: path).standardizedFileURL.path
            }
            let request = TransferRequest(
                session: session, url: source, sha256: sha256?.lowercased(), destination: destination)
            let query = app.map { "?app=\($0)" } ?? ""
            let record = try await options.call {
                try await $0.send(.post, "/v1/transfers\(query)", body: request, as: TransferRecord.self)
            }
            if noWait {
                if options.json { return try options.printJSON(record) }
                return print("Transfer \(record.id) handed to bgd. Watch it with: bgctl transfers")
            }
            let ended = try await watch(record)
            if options.json { return try options.printJSON(ended) }
            switch ended.state {
            case .completed:
                print(
                    "Transfer \(ended.id) done: \(Self.bytes(ended.bytesTransferred)) → \(ended.destination ?? "handed to \(ended.app.map(\.rawValue) ?? "the app")")"
                )
            default:
                FileHandle.standardError.write(
                    Data(
                        "bgctl: transfer \(ended.id) \(ended.state.rawValue): \(ended.error?.description ?? "")\n".utf8)
                )
                throw ExitCode.failure
            }
        }

        /// Redraws a progress bar (bytes, rate, ETA) on a terminal until the transfer ends.
        private func watch(_ record: TransferRecord) async throws -> TransferRecord {
            let isTerminal = isatty(STDERR_FILENO) == 1
            let clock = SystemClock()
            var samples: [(at: Date, bytes: Int64)] = []
            var current = record
            while !current.state.isFinal {
                current = try await options.call {
                    try await $0.send(.get, "/v1/transfers/\(record.id)?wait=1", as: TransferRecord.self)
                }
                let bytes = current.bytesReceived ?? current.bytesTransferred
                samples.append((clock.now, bytes))
                samples = samples.suffix(5)
                if isTerminal && !options.json {
                    FileHandle.standardError.write(
                        Data(("\r\u{1B}[K" + Self.progressLine(current, bytes: bytes, samples: samples)).utf8))
                }
            }
            if isTerminal && !options.json { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }
            return current
        }

        static func progressLine(_ record: TransferRecord, bytes: Int64, samples: [(at: Date, bytes: Int64)]) -> String
        {
            var rate = 0.0
            if let first = samples.first, let last = samples.last, last.at > first.at {
                rate = Double(last.bytes - first.bytes) / last.at.timeIntervalSince(first.at)
            }
            guard let total = record.bytesExpected, total > 0 else {
                return
                    "\(Self.bytes(bytes))  \(Self.bytes(Int64(rate)))/s  \(record.waitingReason ?? record.state.rawValue)"
            }
            let fraction = min(1, Double(bytes) / Double(total))
            let width = 24
            let filled = Int(fraction * Double(width))
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            let eta = rate > 0 ? Duration.seconds((Double(total - bytes) / rate).rounded()).humanDescription : "?"
            let waiting = record.state == .waiting ? "  (\(record.waitingReason ?? "waiting"))" : ""
            return
                "[\(bar)] \(Int(fraction * 100))%  \(Self.bytes(bytes)) / \(Self.bytes(total))  \(Self.bytes(Int64(rate)))/s  ETA \(eta)\(waiting)"
        }

        static func bytes(_ count: Int64) -> String {
            let units = ["B", "KiB", "MiB", "GiB", "TiB"]
            var value = Double(count)
            var unit = 0
            while value >= 1024 && unit < units.count - 1 {
                value /= 1024
                unit += 1
            }
            return unit == 0 ? "\(count) B" : String(format: "%.1f %@", value, units[unit])
        }
    }

    struct Transfers: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List background transfers: state, progress, attempts, next retry and why.",
            subcommands: [List.self, Cancel.self], defaultSubcommand: List.self)

        struct List: AsyncParsableCommand {
            static let configuration = CommandConfiguration(abstract: "List transfers, newest first.")
            @OptionGroup var options: DaemonOptions
            @Option(help: "At most this many.") var limit: Int = 50

            func run() async throws {
                let records = try await options.call {
                    try await $0.send(
                        .get, "/v1/transfers?limit=\(max(1, min(limit, 10_000)))", as: [TransferRecord].self)
                }
                if options.json { return try options.printJSON(records) }
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
                            record.id.description, record.app?.rawValue ?? "-", record.state.rawValue, progress,
                            "\(record.attempts)" + (record.restarts > 0 ? " (\(record.restarts) restarts)" : ""), why,
                            record.url.absoluteString,
                        ]
                    })
            }
        }

        struct Cancel: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                abstract: "Cancel a transfer; an app's hears `cancelled` once.")
            @OptionGroup var options: DaemonOptions
            @Argument(help: "The transfer's id (bgctl transfers).") var id: Int64

            func run() async throws {
                let record = try await options.call {
                    try await $0.send(.delete, "/v1/transfers/\(id)", as: TransferRecord.self)
                }
                if options.json { return try options.printJSON(record) }
                print("Transfer \(record.id): \(record.state.rawValue).")
            }
        }
    }
}
