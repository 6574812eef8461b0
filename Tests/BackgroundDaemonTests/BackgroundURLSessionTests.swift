import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Synchronization
import Testing

@testable import Background

/// The SDK's async face of background sessions, from a foreground app connected to a live daemon.
@Suite(.timeLimit(.minutes(5)))
struct BackgroundURLSessionTests {
    static let app = "com.example.sessions"

    /// A local origin and a daemon with the app registered, and the app's instance in this
    /// process, not yet connected.
    func withApp(
        transfers: TransferService.Configuration = .init(),
        _ body: @Sendable (FaultyOrigin, TestDaemon, BackgroundApplication) async throws -> Void
    ) async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with(transfers: transfers) { daemon in
            let registered = try await daemon.register(Self.app, command: ["/bin/true"], interval: .never)
            let application = BackgroundApplication(
                appID: AppID(rawValue: Self.app)!, token: registered.token, socketPath: daemon.socketPath)
            try await body(origin, daemon, application)
        }
    }

    /// `withApp`, with a background session of `identifier` made and the app connected (the
    /// session first, so that its events find it), until `body` returns.
    func withSession(
        _ identifier: String, delegate: (any BackgroundURLSessionDelegate)? = nil,
        transfers: TransferService.Configuration = .init(),
        _ body: @Sendable (FaultyOrigin, TestDaemon, BackgroundApplication, BackgroundURLSession) async throws -> Void
    ) async throws {
        try await withApp(transfers: transfers) { origin, daemon, application in
            let session = BackgroundURLSession(
                configuration: .background(withIdentifier: identifier), delegate: delegate, application: application)
            let connection = Task { try await application.run() }
            defer { connection.cancel() }
            try await body(origin, daemon, application, session)
        }
    }

    @Test func downloadUploadEventsAndTasks() async throws {
        try await withSession("sdk") { origin, daemon, application, session in
            var events = session.events.makeAsyncIterator()

            // download(from:) waits, and the file is the caller's.
            let (file, task) = try await session.download(
                from: origin.url(seed: 71, size: 400_000), taskDescription: "sdk file")
            #expect(task.taskDescription == "sdk file")
            #expect(
                FaultyOrigin.sha256Digest(of: try Data(contentsOf: file))
                    == FaultyOrigin.sha256(seed: 71, size: 400_000))
            #expect(file.path.contains("/Downloads/"))

            // The same, as a sequence of events in order.
            var seen: [String] = []
            while seen.last != "eventsFinished", let event = await events.next() {
                switch event {
                case .downloadFinished: seen.append("downloadFinished")
                case .completed(_, let error, _): seen.append(error == nil ? "completed" : "failed")
                case .eventsFinished: seen.append("eventsFinished")
                case .progress: continue
                }
            }
            #expect(seen == ["downloadFinished", "completed", "eventsFinished"])

            // A failing download throws its error.
            await #expect(throws: TransferError.self) {
                _ = try await session.download(from: origin.url(seed: 72, size: 1000, faults: ["status": "404"]))
            }

            // upload(fileAt:to:) returns the server's status.
            let source = URL(fileURLWithPath: daemon.directory + "/up.bin")
            try Data(repeating: 7, count: 50_000).write(to: source)
            let (status, _) = try await session.upload(
                fileAt: source, to: origin.baseURL.appendingPathComponent("upload"))
            #expect(status == 201)

            // getAllTasks lists what is not finished; cancel ends it.
            let pending = try await session.downloadTask(with: URL(string: "http://127.0.0.1:9/never")!)
            #expect(try await session.getAllTasks().map(\.taskIdentifier) == [pending.taskIdentifier])
            try await session.cancel(pending)
            #expect(try await session.getAllTasks().isEmpty)
        }
    }

    /// A session's events wait for the app to create the session, and hold only themselves: a
    /// fetch sent after them is handled, they stay open in bgd (the library acknowledges each
    /// event alone), cancelling `run()` returns, and once the app creates the session they are
    /// delivered. Before, the wait sat in the stream's loop: the fetch was never handled, no
    /// expiration either, and `run()` could not be cancelled.
    @Test func eventsForASessionNotYetCreatedHoldOnlyThemselves() async throws {
        try await withApp { origin, daemon, application in
            // A download of the app's session "later" (made before an update, say) that ended while
            // no process of the app ran.
            _ = try await application.client.send(
                .post, "/v1/app/transfers",
                body: TransferRequest(
                    session: "later", url: origin.url(seed: 74, size: 1000), sessionSendsLaunchEvents: false),
                as: TransferRecord.self)
            func sessionEvents() async throws -> [OutboxEntry] {
                try await daemon.admin.send(.get, "/v1/apps/\(Self.app)/events", as: [OutboxEntry].self).filter {
                    if case .fetch = $0.event.body { false } else { true }
                }
            }
            try await daemon.waitUntil {
                try await sessionEvents().contains {
                    if case .sessionEventsFinished = $0.event.body { true } else { false }
                }
            }

            application.onBackgroundFetch { .newData }
            var first: Task<Void, any Error>?
            try await daemon.waitFor({ if case .appConnected = $0 { () } else { nil } }) {
                first = Task { try await application.run() }
            }
            let fetch = try await daemon.admin.send(.post, "/v1/apps/\(Self.app)/fetch?wait=30", as: RunRecord.self)
            #expect(fetch.outcome == .newData, "the fetch behind the session's events is handled")
            #expect(try await sessionEvents().allSatisfy { $0.closedAt == nil }, "the fetch's ack closed no other")
            first?.cancel()
            _ = await first?.result  // returns: nothing waits for the session any more

            // The app creates the session: its events, given up by the first connection, come again
            // and are delivered, in order, and acknowledged.
            let session = BackgroundURLSession(
                configuration: .background(withIdentifier: "later"), application: application)
            var events = session.events.makeAsyncIterator()
            let second = Task { try await application.run() }
            defer { second.cancel() }
            var seen: [String] = []
            while seen.last != "eventsFinished", let event = await events.next() {
                switch event {
                case .downloadFinished: seen.append("downloadFinished")
                case .completed: seen.append("completed")
                case .eventsFinished: seen.append("eventsFinished")
                case .progress: continue
                }
            }
            #expect(seen == ["downloadFinished", "completed", "eventsFinished"])
            // Each acknowledged after its delivery (nothing in bgd's activity says so).
            #expect(try await eventuallyAsync { try await sessionEvents().allSatisfy { $0.closedBy == "app" } })
        }
    }

    /// Who gets a finished download: a `download(from:)` caller, whose file it is (the delegate
    /// is not handed it, as iOS's async methods return the file instead); else the delegate
    /// first, at bgd's hand-off place, and what it leaves goes to `events`. Before, a listener's
    /// copy moved the file first and the delegate was handed the place it had just left.
    @Test func aFinishedDownloadHasOneOwner() async throws {
        let delegate = LocationRecorder()
        try await withSession("both", delegate: delegate) { origin, daemon, application, session in
            let (file, _) = try await session.download(from: origin.url(seed: 75, size: 2000))
            #expect(FileManager.default.fileExists(atPath: file.path), "the caller's")
            #expect(delegate.seen.withLock { $0 }.isEmpty, "the delegate was not handed the caller's file")

            var events = session.events.makeAsyncIterator()
            let task = try await session.downloadTask(with: origin.url(seed: 76, size: 2000))
            while let event = await events.next() {
                if case .completed(let done, _, _) = event, done.taskIdentifier == task.taskIdentifier { break }
            }
            let seen = delegate.seen.withLock { $0 }
            #expect(seen.count == 1 && seen.values.allSatisfy { $0 }, "handed a file that was there: \(seen)")
            #expect(FileManager.default.fileExists(atPath: daemon.directory + "/taken-\(task.taskIdentifier)"))
            // Nothing is kept for a caller once none waits.
            #expect(session.heldForCallers == 0)
        }
    }

    /// Without a delegate, a download that ends while a `download(from:)` caller waits for
    /// another is not the caller's: a listener of `events` told of it owns it. Before, the file
    /// was removed from under the listener when the caller's own download ended.
    @Test func aFileAListenerWasToldOfStaysWhenNoCallerClaimsIt() async throws {
        try await withSession("listened") { origin, daemon, application, session in
            var events = session.events.makeAsyncIterator()
            let waiting = Task {
                try await session.download(from: origin.url(seed: 77, size: 2 << 20, faults: ["rate": String(1 << 20)]))
            }
            let other = try await session.downloadTask(with: origin.url(seed: 78, size: 2000))
            var told: URL?
            while told == nil, let event = await events.next() {
                if case .downloadFinished(let task, let location) = event, task.taskIdentifier == other.taskIdentifier {
                    told = location
                }
            }
            let (file, _) = try await waiting.value
            #expect(FileManager.default.fileExists(atPath: file.path), "the caller's")
            let location = try #require(told)
            #expect(FileManager.default.fileExists(atPath: location.path), "the listener's: \(location.path)")
            #expect(session.heldForCallers == 0)
        }
    }

    /// A download that ends before bgd's answer to its submission reaches the caller (a small
    /// file, a fast origin) is still the caller's, with a delegate there: the session's events
    /// wait for the caller to wait. Before, the delegate was handed the file, and the caller got
    /// "bgd reported success without a file".
    @Test func aDownloadThatEndsBeforeItsCallerWaitsIsTheCallers() async throws {
        let delegate = LocationRecorder()
        try await withSession("raced", delegate: delegate) { origin, daemon, application, session in
            let (task, outcome) = try await session.submitAndWait {
                let task = try await session.downloadTask(with: origin.url(seed: 79, size: 2000))
                // The answer is late: the download ends, and its events reach the app, first.
                try await daemon.waitUntil {
                    try await daemon.admin.send(.get, "/v1/transfers/\(task.taskIdentifier)", as: TransferRecord.self)
                        .state == .completed
                }
                _ = await eventually { !delegate.seen.withLock { $0 }.isEmpty }
                return task
            }
            #expect(delegate.seen.withLock { $0 }.isEmpty, "the delegate was handed the caller's file")
            let file = try #require(outcome.file, "\(outcome)")
            #expect(
                FaultyOrigin.sha256Digest(of: try Data(contentsOf: file)) == FaultyOrigin.sha256(seed: 79, size: 2000))
            #expect(session.heldForCallers == 0 && task.taskDescription == nil)
        }
    }

    /// While a caller's submission is under way, the session's events wait off the stream's
    /// loop: a fetch that comes meanwhile is handled. (A first version waited in the loop, and
    /// every fetch, push and expiration waited for the submission with them.)
    @Test func aSubmissionUnderWayHoldsOnlyItsSessionsEvents() async throws {
        try await withSession("held") { origin, daemon, application, session in
            application.onBackgroundFetch { .newData }
            let (_, outcome) = try await session.submitAndWait {
                let task = try await session.downloadTask(with: origin.url(seed: 81, size: 2000))
                try await daemon.waitUntil {
                    try await daemon.admin.send(.get, "/v1/transfers/\(task.taskIdentifier)", as: TransferRecord.self)
                        .state == .completed
                }
                let fetch = try await daemon.admin.send(
                    .post, "/v1/apps/\(Self.app)/fetch?wait=30", as: RunRecord.self)
                #expect(fetch.outcome == .newData, "\(fetch)")
                return task
            }
            #expect(outcome.file != nil, "\(outcome)")
        }
    }

    /// Cancelling the task that waits in `download(from:)` cancels the download, as iOS's
    /// async method does: the caller gets the cancellation at once, bgd stops the transfer.
    /// Before, the caller waited on until the download ended.
    @Test func cancellingTheCallerCancelsItsDownload() async throws {
        try await withSession("cancelled") { origin, daemon, application, session in
            let caller = Task {
                try await session.download(from: origin.url(seed: 80, size: 4 << 20, faults: ["rate": String(1 << 20)]))
            }
            await origin.waitUntilServed(100_000)
            caller.cancel()
            let thrown = await caller.result
            guard case .failure(let error as TransferError) = thrown else {
                Issue.record("\(thrown)")
                return
            }
            #expect(error.code == .cancelled, "\(error)")
            // The caller is answered at once; bgd is asked to cancel the transfer beside it.
            try await daemon.waitUntil {
                try await daemon.admin.send(.get, "/v1/transfers", as: [TransferRecord].self).map(\.state)
                    == [.cancelled]
            }
            #expect(session.heldForCallers == 0)
        }
    }

    /// D13: the partial file is cut short while paused: the checkpoint is not trusted, the
    /// download starts over and still ends with the right bytes.
    @Test func aTruncatedPartialIsNotTrusted() async throws {
        try await withSession("sdk", transfers: .init(engine: .init(checkpointInterval: 256 << 10))) {
            origin, daemon, application, session in
            let size = 3 << 20
            let task = try await session.downloadTask(
                with: origin.url(seed: 73, size: size, faults: ["rate": String(1 << 20)]))
            await origin.waitUntilServed(1 << 20)
            let resumeData = try await session.cancel(task, byProducingResumeData: ())
            #expect(resumeData.bytesTransferred > 0)
            let paused = try await daemon.admin.send(
                .get, "/v1/transfers/\(task.taskIdentifier)", as: TransferRecord.self)
            #expect(paused.state == .paused, "\(paused)")
            let partial = daemon.directory + "/state/containers/\(Self.app)/transfers/\(task.taskIdentifier).partial"
            try FileHandle(forWritingAtPath: partial).map {
                try $0.truncate(atOffset: 1000); try $0.close()
            }
            var events = session.events.makeAsyncIterator()
            _ = try await session.downloadTask(withResumeData: resumeData)
            var location: URL?
            while let event = await events.next() {
                if case .downloadFinished(_, let file) = event { location = file }
                if case .completed = event { break }
            }
            let record = try await daemon.admin.send(
                .get, "/v1/transfers/\(task.taskIdentifier)", as: TransferRecord.self)
            #expect(record.state == .completed && record.restarts >= 1, "\(record)")
            let file = try #require(location)
            #expect(
                FaultyOrigin.sha256Digest(of: try Data(contentsOf: file)) == FaultyOrigin.sha256(seed: 73, size: size))
        }
    }
}

/// Records each location a delegate is handed, and whether a file was there; takes the file
/// (to `taken-<id>` beside the daemon's state), as an iOS delegate must.
final class LocationRecorder: BackgroundURLSessionDelegate {
    let seen = Mutex<[String: Bool]>([:])

    func urlSession(
        _ session: BackgroundURLSession, downloadTask: BackgroundURLSessionTask, didFinishDownloadingTo location: URL
    ) {
        seen.withLock { $0[location.path] = FileManager.default.fileExists(atPath: location.path) }
        // <directory>/state/containers/<app>/transfers/<file>: five components off is <directory>.
        var directory = location
        for _ in 0..<5 { directory.deleteLastPathComponent() }
        try? FileManager.default.moveItem(
            at: location, to: directory.appendingPathComponent("taken-\(downloadTask.taskIdentifier)"))
    }
}
