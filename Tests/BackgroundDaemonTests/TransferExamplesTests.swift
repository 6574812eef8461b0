import BackgroundDaemon
import BackgroundModel
import BackgroundPolicy
import BackgroundTesting
import Foundation
import Testing

/// The seeds' transfer samples, run through a live daemon against a real origin.
@Suite(.timeLimit(.minutes(5)))
struct TransferExamplesTests {
    func container(_ daemon: TestDaemon, _ app: String) -> String { daemon.directory + "/state/containers/\(app)" }

    /// Seed 004: each background fetch downloads the image into Documents and bumps the badge.
    @Test func imageFetchSavesTheImageAndCountsTheBadge() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with { daemon in
            let app = "com.example.imagefetch"
            let url = origin.url(seed: 51, size: 200_000)
            try await daemon.register(
                app, command: [try BuiltProducts.path(of: "ImageFetch"), "--url", url.absoluteString],
                interval: .minimum)
            for expectedBadge in 1...2 {
                let run = try await daemon.admin.send(
                    .post, "/v1/apps/\(app)/fetch?wait=60", as: RunRecord.self, timeout: .seconds(70))
                #expect(run.outcome == .newData, "\(run)")
                let badge = try String(contentsOfFile: container(daemon, app) + "/badge", encoding: .utf8)
                #expect(badge == String(expectedBadge))
            }
            let image = try Data(contentsOf: URL(fileURLWithPath: container(daemon, app) + "/Documents/200000"))
            #expect(FaultyOrigin.sha256Digest(of: image) == FaultyOrigin.sha256(seed: 51, size: 200_000))
        }
    }

    /// Seed 001: the fetch starts a background-session download and answers when it completes.
    @Test func downloadManagerFinishesWithinTheFetch() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with { daemon in
            let app = "com.example.downloads"
            let url = origin.url(seed: 52, size: 300_000)
            try await daemon.register(
                app, command: [try BuiltProducts.path(of: "DownloadManager"), "--url", url.absoluteString],
                interval: .minimum)
            let run = try await daemon.admin.send(
                .post, "/v1/apps/\(app)/fetch?wait=60", as: RunRecord.self, timeout: .seconds(70))
            #expect(run.outcome == .noData, "\(run)")  // the seed answers NoData on success
            let library = container(daemon, app) + "/Library"
            let files = try FileManager.default.contentsOfDirectory(atPath: library)
            #expect(files.count == 1)
            let data = try Data(contentsOf: URL(fileURLWithPath: library + "/" + files[0]))
            #expect(FaultyOrigin.sha256Digest(of: data) == FaultyOrigin.sha256(seed: 52, size: 300_000))
        }
    }

    /// Seed 001 when the download outlives the fetch: the fetch expires, bgd carries the download
    /// on, then launches the app for the session's events, which saves the file.
    @Test func downloadManagerIsRelaunchedForTheSessionEvents() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        try await TestDaemon.with(
            budget: RunBudget(budget: .seconds(30), expirationLead: .seconds(5), killGrace: .seconds(1))
        ) { daemon in
            let app = "com.example.downloads"
            // About 1.5 s of transfer: longer than the fetch is given below.
            let url = origin.url(seed: 53, size: 600_000, faults: ["rate": "400000"])
            try await daemon.register(
                app, command: [try BuiltProducts.path(of: "DownloadManager"), "--url", url.absoluteString],
                interval: .minimum)
            var activities = daemon.activity.subscribe().makeAsyncIterator()
            let run = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
            // The download is under way: the fetch's budget runs out.
            while let activity = await activities.next() {
                if case .transferAttemptStarted = activity { break }
            }
            daemon.clock.advance(by: .seconds(31))
            // The fetch expires; the download completes without the app; the app is launched for
            // the session's events and acknowledges them.
            try await daemon.waitUntil {
                let expired = try await daemon.store.run(run.id)?.outcome == .expired
                let transfers = try await daemon.store.transfers(app: AppID(rawValue: app)!)
                let events = try await daemon.store.outbox(for: AppID(rawValue: app)!)
                return expired && transfers.first?.state == .completed
                    && events.contains { $0.event.kind == "sessionEventsFinished" }
                    && events.allSatisfy { $0.closedAt != nil }
            }
            let library = container(daemon, app) + "/Library"
            let files = (try? FileManager.default.contentsOfDirectory(atPath: library)) ?? []
            #expect(files.count == 1, "\(files)")
            if let file = files.first {
                let data = try Data(contentsOf: URL(fileURLWithPath: library + "/" + file))
                #expect(FaultyOrigin.sha256Digest(of: data) == FaultyOrigin.sha256(seed: 53, size: 600_000))
            }
            // The app prints as it exits (stdout to a file is block-buffered), maybe after the acks.
            let logPath = container(daemon, app) + "/launch.log"
            func log() -> String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }
            #expect(await eventually { log().contains("handleEventsForBackgroundURLSession 12345") }, "\(log())")
        }
    }
}
