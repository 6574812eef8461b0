import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// What transfers hold of the disk stays bounded: an app's waiting uploads hold at most its
/// quota, a transfer that fails gives its file back, and a bgd that starts removes the files
/// of transfers that ended while none was there to.
@Suite(.timeLimit(.minutes(5)))
struct TransferFilesTests {
    static let later = "2100-01-01T00:00:00Z"

    /// A file of `size` bytes in the app's container, for it to upload.
    func containerFile(_ daemon: TestDaemon, app: String, name: String, size: Int) throws -> String {
        let directory = daemon.directory + "/state/containers/" + app
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let path = directory + "/" + name
        try Data(repeating: 7, count: size).write(to: URL(fileURLWithPath: path))
        return path
    }

    func upload(_ daemon: TestDaemon, _ file: String, token: String, timeout: Int? = nil) async throws -> RawHTTP.Answer {
        let extra = timeout.map { #","timeoutForResource":\#($0)"# } ?? #","earliestBegin":"\#(Self.later)""#
        return try await RawHTTP.request(
            daemon.socketPath, .POST, "/v1/app/transfers",
            body: Data(#"{"session":"s","kind":"upload","url":"http://127.0.0.1:9/up","uploadFile":"\#(file)"\#(extra)}"#.utf8),
            token: token)
    }

    @Test func anAppsWaitingUploadsHoldAtMostItsQuota() async throws {
        try await TestDaemon.with(transfers: .init(uploadQuota: 1 << 20)) { daemon in
            let app = try await daemon.register("com.example.up", command: ["/bin/true"], interval: .never)
            let piece = try containerFile(daemon, app: "com.example.up", name: "piece", size: 400 << 10)
            let whole = try containerFile(daemon, app: "com.example.up", name: "whole", size: 2 << 20)
            let first = try await upload(daemon, piece, token: app.token)
            #expect(first.status == 201, "\(first)")
            #expect(try await upload(daemon, piece, token: app.token).status == 201)
            // 800 KiB held: 400 more would pass the 1 MiB.
            let third = try await upload(daemon, piece, token: app.token)
            #expect(third.status == 429 && third.errorCode == "tooManyUploadBytes", "\(third)")
            let said = String(decoding: third.body, as: UTF8.self)
            #expect(said.contains("800.0 KiB") && said.contains("--upload-quota"), "\(said)")
            // A file larger than the whole quota never fits: 413, not "wait".
            let large = try await upload(daemon, whole, token: app.token)
            #expect(large.status == 413 && large.errorCode == "uploadTooLarge", "\(large)")
            #expect(try await daemon.store.outstandingTransferCount(of: app.app.id) == 2, "nothing was made")

            // One cancelled gives its bytes back.
            let id = try #require(first.json["id"] as? Int)
            let cancelled = try await RawHTTP.request(
                daemon.socketPath, .DELETE, "/v1/app/transfers/\(id)", token: app.token)
            #expect(cancelled.status == 200, "\(cancelled)")
            #expect(try await upload(daemon, piece, token: app.token).status == 201)
            // The operator's own uploads are not an app's.
            let outside = daemon.directory + "/whole"
            try FileManager.default.copyItem(atPath: whole, toPath: outside)
            let operatorUpload = try await daemon.admin.send(
                .post, "/v1/transfers",
                body: TransferRequest(
                    session: "s", kind: .upload, url: URL(string: "http://127.0.0.1:9/up")!, uploadFile: outside,
                    earliestBegin: Date(timeIntervalSince1970: 4_102_444_800)),
                as: TransferRecord.self)
            #expect(operatorUpload.state == .waiting)
        }
    }

    /// What bgd notes of a transfer while it is outstanding goes when it ends: before, one entry
    /// per transfer ever made stayed for as long as bgd ran.
    @Test func anEndedTransferLeavesNoNoteBehind() async throws {
        try await TestDaemon.with { daemon in
            let app = try await daemon.register("com.example.up", command: ["/bin/true"], interval: .never)
            let file = try containerFile(daemon, app: "com.example.up", name: "piece", size: 10)
            var ids: [Int] = []
            for _ in 0..<20 { ids.append(try #require(try await upload(daemon, file, token: app.token).json["id"] as? Int)) }
            try await daemon.daemon.transferService.planOnce()
            #expect(await daemon.daemon.transferService.transfersNoted == 20)
            for id in ids {
                let cancelled = try await RawHTTP.request(
                    daemon.socketPath, .DELETE, "/v1/app/transfers/\(id)", token: app.token)
                #expect(cancelled.status == 200)
            }
            #expect(await daemon.daemon.transferService.transfersNoted == 0)
            // An app unregistered takes its transfers with it, and their notes.
            for _ in 0..<5 { _ = try await upload(daemon, file, token: app.token) }
            try await daemon.daemon.transferService.planOnce()
            #expect(await daemon.daemon.transferService.transfersNoted == 5)
            try await daemon.admin.send(.delete, "/v1/apps/com.example.up")
            try await daemon.daemon.transferService.planOnce()
            #expect(await daemon.daemon.transferService.transfersNoted == 0)
        }
    }

    /// A failed upload (here: its resource timeout passes while the server answers 503) leaves
    /// no copy behind; before, every one kept its whole file for ever.
    @Test func aFailedUploadGivesItsCopyBack() async throws {
        // The transfer tests' origin and daemon, the clock at TransferTests.start.
        try await TransferTests().withOrigin { origin, daemon in
            let app = try await daemon.register("com.example.up", command: ["/bin/true"], interval: .never)
            let file = try containerFile(daemon, app: "com.example.up", name: "report", size: 300 << 10)
            let url = origin.baseURL.appendingPathComponent("upload").absoluteString + "?fail=1000"
            let body = Data(
                #"{"session":"s","kind":"upload","url":"\#(url)","uploadFile":"\#(file)","timeoutForResource":60}"#.utf8)
            let created = try await RawHTTP.request(
                daemon.socketPath, .POST, "/v1/app/transfers", body: body, token: app.token)
            let id = TransferID(Int64(try #require(created.json["id"] as? Int)))
            let copies = daemon.directory + "/state/containers/com.example.up/transfers"
            #expect(try FileManager.default.contentsOfDirectory(atPath: copies) == ["\(id).upload"])
            let ended = try await TransferTests().waitForEnd(id, daemon, maximumRetries: 20)
            #expect(ended.state == .failed && ended.error?.code == .timedOut, "\(ended)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: copies).isEmpty)
        }
    }

    /// The app com.example.sly registered, and its download of `url` handed to bgd to start a
    /// minute on (the transfer tests' clock): time for the test to tamper with its container.
    func laterDownload(_ url: URL, _ daemon: TestDaemon) async throws -> TransferID {
        let app = try await daemon.register("com.example.sly", command: ["/bin/true"], interval: .never)
        let body = Data(#"{"session":"s","url":"\#(url.absoluteString)","earliestBegin":"2026-01-05T09:01:00Z"}"#.utf8)
        let created = try await RawHTTP.request(
            daemon.socketPath, .POST, "/v1/app/transfers", body: body, token: app.token)
        return TransferID(Int64(try #require(created.json["id"] as? Int)))
    }

    /// An app may write its container, so it may put a link where its transfers directory was,
    /// pointing at a directory it may not write itself (here one standing for
    /// ~/.config/autostart): its download still lands in its container, nothing reaches there.
    @Test func anAppCannotRedirectItsDownloadsWithALink() async throws {
        // The transfer tests' origin and daemon, the clock at TransferTests.start.
        try await TransferTests().withOrigin { origin, daemon in
            let id = try await laterDownload(origin.url(seed: 70, size: 4096), daemon)
            let transfers = daemon.directory + "/state/containers/com.example.sly/transfers"
            let elsewhere = daemon.directory + "/autostart"
            try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
            try FileManager.default.removeItem(atPath: transfers)
            try FileManager.default.createSymbolicLink(atPath: transfers, withDestinationPath: elsewhere)

            let ended = try await TransferTests().waitForEnd(id, daemon)
            #expect(ended.state == .completed, "\(ended)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere).isEmpty, "nothing reached it")
            let kind = try FileManager.default.attributesOfItem(atPath: transfers)[.type] as? FileAttributeType
            #expect(kind == .typeDirectory, "bgd's own directory again, not a link")
            #expect(try FileManager.default.contentsOfDirectory(atPath: transfers).count == 1)
        }
    }

    /// A link the app put at its download's partial file (here to a file it may not write
    /// itself): nothing is written through it, and the transfer fails at its first attempt,
    /// saying why. Before, each attempt failed to open it and was retried, for a day.
    @Test func aLinkAtADownloadsPlaceFailsItAtOnce() async throws {
        try await TransferTests().withOrigin { origin, daemon in
            let id = try await laterDownload(origin.url(seed: 71, size: 4096), daemon)
            let target = daemon.directory + "/not-the-apps"
            try Data("kept".utf8).write(to: URL(fileURLWithPath: target))
            let place = daemon.directory + "/state/containers/com.example.sly/transfers/\(id).partial"
            try FileManager.default.createSymbolicLink(atPath: place, withDestinationPath: target)

            let ended = try await TransferTests().waitForEnd(id, daemon, maximumRetries: 0)
            #expect(ended.state == .failed && ended.error?.code == .fileError && ended.attempts == 1, "\(ended)")
            #expect(try String(contentsOfFile: target, encoding: .utf8) == "kept")
            #expect(!FileManager.default.fileExists(atPath: place), "the link is gone")
        }
    }

    /// An app may write its container, where bgd keeps the copy of its upload: a link (or a
    /// second name) put there for a file the app may not read is not sent to its server. The
    /// transfer fails, the link goes, the file it named stays.
    @Test func anAppCannotHaveBgdUploadAFileItMayNotRead() async throws {
        try await TransferTests().withOrigin { origin, daemon in
            let app = try await daemon.register("com.example.sly", command: ["/bin/true"], interval: .never)
            let file = try containerFile(daemon, app: "com.example.sly", name: "report", size: 1000)
            let secret = daemon.directory + "/id_ed25519"
            try Data("-----BEGIN OPENSSH PRIVATE KEY-----".utf8).write(to: URL(fileURLWithPath: secret))
            let url = origin.baseURL.appendingPathComponent("upload").absoluteString
            let body = Data(
                #"{"session":"s","kind":"upload","url":"\#(url)","uploadFile":"\#(file)","earliestBegin":"2026-01-05T09:01:00Z"}"#
                    .utf8)
            let copies = daemon.directory + "/state/containers/com.example.sly/transfers"
            for index in ["a symbolic link", "a second name"] {
                let created = try await RawHTTP.request(
                    daemon.socketPath, .POST, "/v1/app/transfers", body: body, token: app.token)
                let id = TransferID(Int64(try #require(created.json["id"] as? Int)))
                try FileManager.default.removeItem(atPath: copies + "/\(id).upload")
                if index == "a symbolic link" {
                    try FileManager.default.createSymbolicLink(atPath: copies + "/\(id).upload", withDestinationPath: secret)
                } else {
                    try FileManager.default.linkItem(atPath: secret, toPath: copies + "/\(id).upload")
                }

                let ended = try await TransferTests().waitForEnd(id, daemon)
                #expect(ended.state == .failed && ended.error?.code == .fileError, "\(index): \(ended)")
                #expect(origin.uploads.isEmpty, "\(index): nothing was sent")
                #expect(try FileManager.default.contentsOfDirectory(atPath: copies).isEmpty, "\(index): the planted name went")
                #expect(try String(contentsOfFile: secret, encoding: .utf8).hasPrefix("-----BEGIN"), "\(index)")
            }
        }
    }

    /// Files of transfers that ended while no bgd could remove them go when bgd starts; those
    /// of transfers still outstanding, of ones newer than any bgd has made, and an app's
    /// finished downloads stay.
    @Test func bgdRemovesTheFilesOfEndedTransfersWhenItStarts() async throws {
        let directory = TemporaryDirectory.make()
        let copies = directory + "/state/containers/com.example.up/transfers"
        let downloads = directory + "/downloads"
        try FileManager.default.createDirectory(atPath: downloads, withIntermediateDirectories: true)
        let (waiting, ended, operatorEnded) = try await TestDaemon.with(directory: directory) { daemon in
            let app = try await daemon.register("com.example.up", command: ["/bin/true"], interval: .never)
            let file = try containerFile(daemon, app: "com.example.up", name: "piece", size: 1000)
            let waiting = try #require(try await upload(daemon, file, token: app.token).json["id"] as? Int)
            let ended = try #require(try await upload(daemon, file, token: app.token).json["id"] as? Int)
            let cancelled = try await RawHTTP.request(
                daemon.socketPath, .DELETE, "/v1/app/transfers/\(ended)", token: app.token)
            #expect(cancelled.status == 200, "\(cancelled)")
            // The operator's downloads keep their partial files beside their destinations.
            var operatorIDs: [TransferID] = []
            for name in ["report.pdf", "data.bin"] {
                let record = try await daemon.admin.send(
                    .post, "/v1/transfers",
                    body: TransferRequest(
                        session: "s", url: URL(string: "http://127.0.0.1:9/\(name)")!,
                        earliestBegin: Date(timeIntervalSince1970: 4_102_444_800), destination: downloads + "/" + name),
                    as: TransferRecord.self)
                operatorIDs.append(record.id)
            }
            _ = try await daemon.admin.send(.delete, "/v1/transfers/\(operatorIDs[0].rawValue)", as: TransferRecord.self)
            return (waiting, ended, operatorIDs[0].rawValue)
        }
        // What a crash between an ending and its file's removal leaves, and what must stay.
        let planted = ["\(ended).upload", "\(ended).partial", "999999.partial", "\(ended)-report.bin", "notes.txt"]
        for name in planted { try Data("x".utf8).write(to: URL(fileURLWithPath: copies + "/" + name)) }
        try FileManager.default.createDirectory(atPath: directory + "/state/transfers", withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: directory + "/state/transfers/\(ended).partial"))

        // An app that made its `transfers` a link points bgd at a directory of its choosing:
        // nothing there is removed.
        let elsewhere = directory + "/elsewhere"
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        try Data("x".utf8).write(to: URL(fileURLWithPath: elsewhere + "/\(ended).partial"))
        let linker = directory + "/state/containers/com.example.linker"
        try FileManager.default.createDirectory(atPath: linker, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: linker + "/transfers", withDestinationPath: elsewhere)

        // A crash between the operator's cancel and its file's removal; the other is still waiting.
        let operatorLeftover = downloads + "/.report.pdf.bgd-\(operatorEnded).partial"
        let operatorWaiting = downloads + "/.data.bin.bgd-\(operatorEnded + 1).partial"
        for path in [operatorLeftover, operatorWaiting] { try Data("x".utf8).write(to: URL(fileURLWithPath: path)) }

        try await TestDaemon.with(directory: directory) { _ in
            #expect(!FileManager.default.fileExists(atPath: operatorLeftover))
            #expect(FileManager.default.fileExists(atPath: operatorWaiting), "its transfer has not ended")
            #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere) == ["\(ended).partial"])
            let left = Set(try FileManager.default.contentsOfDirectory(atPath: copies))
            #expect(left == ["\(waiting).upload", "999999.partial", "\(ended)-report.bin", "notes.txt"], "\(left)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: directory + "/state/transfers").isEmpty)
        }
    }
}
