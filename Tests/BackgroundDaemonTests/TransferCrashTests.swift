import Background
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// D1 for transfers: `kill -9` of a real bgd at seeded random moments of a download. The file
/// completes with the right bytes, what is fetched again stays within a checkpoint (plus what was
/// in flight) per kill, and the app sees exactly one completion.
/// More iterations: BGD_KILL_ITERATIONS=50 BGD_KILL_SEED=7 swift test --filter TransferCrashTests
@Suite(.timeLimit(.minutes(5)))
struct TransferCrashTests {
    static let app = "com.example.crashy"

    /// `bgctl download` watching when bgd is killed and started again: it waits for bgd, says
    /// so, and ends with the download done — the transfer survives bgd, and so does the watch.
    @Test func aWatchedDownloadOutlivesABgdRestart() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        let directory = TemporaryDirectory.make()
        let state = directory + "/state"
        let socket = directory + "/bgd.sock"
        let arguments = ["--transfer-checkpoint", "1MiB", "--durability", "normal", "--conditions", "unconstrained"]
        var daemon = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        let size = 4 << 20
        let url = origin.url(seed: 33, size: size, faults: ["rate": String(2 << 20)])
        let watch = Task {
            try await Command.run(
                try BuiltProducts.path(of: "bgctl"),
                ["download", url.absoluteString, "--to", directory + "/file.bin", "--socket", socket])
        }
        await origin.waitUntilServed(1 << 20)
        daemon.signal(SIGKILL)
        _ = await daemon.waitForExit()
        daemon = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        let output = try await watch.value
        #expect(output.status == 0, "\(output)")
        #expect(output.standardError.contains("bgd is not answering; transfer 1 carries on"), "\(output.standardError)")
        #expect(output.standardOutput.contains("Transfer 1 done"), "\(output.standardOutput)")
        #expect(
            FaultyOrigin.sha256Digest(of: try Data(contentsOf: URL(fileURLWithPath: directory + "/file.bin")))
                == FaultyOrigin.sha256(seed: 33, size: size))
        daemon.signal(SIGTERM)
        _ = await daemon.waitForExit()
    }

    @Test func killNineDuringADownloadLosesNothingAndDeliversOnce() async throws {
        let environment = ProcessInfo.processInfo.environment
        let kills = environment["BGD_KILL_ITERATIONS"].flatMap(Int.init) ?? 4
        var random = SeededRandom(seed: environment["BGD_KILL_SEED"].flatMap(UInt64.init) ?? 1)
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        let directory = TemporaryDirectory.make()
        let state = directory + "/state"
        let socket = directory + "/bgd.sock"
        let checkpoint = 1 << 20
        let arguments = ["--transfer-checkpoint", "1MiB", "--durability", "normal", "--conditions", "unconstrained"]
        let size = (kills + 2) * (2 << 20)
        let admin = DaemonClient(socketPath: socket)

        var daemon = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        _ = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: Self.app)!,
                launchCommand: LaunchCommand([try BuiltProducts.path(of: "bgd-fixture-app"), "newData"])!,
                fetchInterval: .never),
            as: RegisteredApp.self)
        // About 4 MiB/s: slow enough to be killed in the middle, fast enough for a test.
        let url = origin.url(seed: 31, size: size, faults: ["rate": String(4 << 20)])
        let record = try await admin.send(
            .post, "/v1/transfers?app=\(Self.app)", body: TransferRequest(session: "fixture", url: url),
            as: TransferRecord.self)

        for _ in 0..<kills {
            let served = origin.bytesServed
            await origin.waitUntilServed(served + Int.random(in: 300_000..<1_800_000, using: &random))
            daemon.signal(SIGKILL)
            _ = await daemon.waitForExit()
            daemon = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        }
        let ended = try await admin.send(
            .get, "/v1/transfers/\(record.id)?wait=120", as: TransferRecord.self, timeout: .seconds(130))
        #expect(ended.state == .completed, "\(ended)")
        let refetched = origin.bytesServed - size
        #expect(refetched <= kills * (checkpoint + (1 << 20)), "fetched again: \(refetched) bytes over \(kills) kills")
        print(
            "kill -9 ×\(kills): \(refetched) bytes fetched again (\(refetched / max(1, kills)) per kill; checkpoint every \(checkpoint))"
        )

        // The app is launched for the events: one completion, the right bytes.
        let log = state + "/containers/\(Self.app)/fixture.log"
        let digest = FaultyOrigin.sha256(seed: 31, size: size)
        var lines: [String] = []
        for _ in 0..<200 {
            lines = ((try? String(contentsOfFile: log, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
            if lines.contains(where: { $0.hasPrefix("eventsFinished") }) { break }
            // Bgd's clock, not ours.
            _ = try await admin.send(.get, "/v1/transfers/\(record.id)?wait=1", as: TransferRecord.self)
        }
        #expect(
            lines == [
                "handleEvents fixture", "finished \(record.id) \(digest)", "completed \(record.id) ok",
                "eventsFinished fixture",
            ])
        daemon.signal(SIGTERM)
        _ = await daemon.waitForExit()
    }
}

extension TransferCrashTests {
    /// bgd is killed after the server took an upload (2xx, checkpoint committed) and before the
    /// completion is committed: the next bgd completes it with the server's answer, sends nothing
    /// again, and removes its copy only then. Before, the copy was gone already, and the upload
    /// the server held was reported failed ("bgd's copy of the upload is gone").
    @Test func anUploadTheServerTookIsNeitherSentAgainNorFailedAfterACrash() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        let directory = TemporaryDirectory.make()
        let (state, socket) = (directory + "/state", directory + "/bgd.sock")
        let arguments = ["--conditions", "unconstrained"]
        let admin = DaemonClient(socketPath: socket)
        let crashing = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, arguments: arguments,
            environment: ["BGD_FAILPOINT": "transfer.afterUploadAccepted:once"])
        let source = directory + "/report.bin"
        let body = Data(FaultyOrigin.body(seed: 71, size: 300_000).readableBytesView)
        try body.write(to: URL(fileURLWithPath: source))
        let record = try await admin.send(
            .post, "/v1/transfers",
            body: TransferRequest(
                session: "test", kind: .upload, url: origin.baseURL.appendingPathComponent("upload"), uploadFile: source),
            as: TransferRecord.self)
        _ = await crashing.waitForExit()  // the failpoint ended it, as a kill -9 would
        let copy = state + "/transfers/\(record.id).upload"
        #expect(FileManager.default.fileExists(atPath: copy), "the copy outlives the crash")

        let daemon = try await DaemonProcess(stateDirectory: state, socketPath: socket, arguments: arguments)
        defer { daemon.signal(SIGKILL) }
        let ended = try await admin.send(
            .get, "/v1/transfers/\(record.id)?wait=60", as: TransferRecord.self, timeout: .seconds(70))
        #expect(ended.state == .completed && ended.statusCode == 201 && ended.error == nil, "\(ended)")
        #expect(origin.uploads.values.map(\.count) == [1], "sent once")
        #expect(!FileManager.default.fileExists(atPath: copy), "removed once the completion is committed")
    }

    /// bgd is killed once an upload's copy is made and before its transfer is: the request had no
    /// answer, so no transfer comes of it, and the next bgd removes the copy. Before, the transfer
    /// was committed first and the copy made after, so a crash in the middle of a long copy left a
    /// waiting transfer with half a file, which the next bgd sent and reported done.
    @Test func aCrashWhileAnUploadIsCopiedLeavesNoTransferAndNoCopy() async throws {
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        let directory = TemporaryDirectory.make()
        let (state, socket) = (directory + "/state", directory + "/bgd.sock")
        let admin = DaemonClient(socketPath: socket)
        let crashing = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, environment: ["BGD_FAILPOINT": "transfer.afterUploadCopy:once"])
        let source = directory + "/report.bin"
        try Data(repeating: 7, count: 100_000).write(to: URL(fileURLWithPath: source))
        let request = TransferRequest(
            session: "test", kind: .upload, url: origin.baseURL.appendingPathComponent("upload"), uploadFile: source)
        await #expect(throws: (any Error).self, "no answer: bgd was killed") {
            try await admin.send(.post, "/v1/transfers", body: request, as: TransferRecord.self)
        }
        _ = await crashing.waitForExit()
        let transfers = state + "/transfers"
        let left = try FileManager.default.contentsOfDirectory(atPath: transfers)
        #expect(left.count == 1 && left[0].hasPrefix(".copying-"), "\(left)")

        let daemon = try await DaemonProcess(stateDirectory: state, socketPath: socket)
        defer { daemon.signal(SIGKILL) }
        #expect(try await admin.send(.get, "/v1/transfers", as: [TransferRecord].self).isEmpty)
        #expect(try FileManager.default.contentsOfDirectory(atPath: transfers).isEmpty, "the copy is swept")
        #expect(origin.uploads.isEmpty)
        // And the next upload goes as any other.
        let record = try await admin.send(.post, "/v1/transfers", body: request, as: TransferRecord.self)
        let ended = try await admin.send(
            .get, "/v1/transfers/\(record.id)?wait=60", as: TransferRecord.self, timeout: .seconds(70))
        #expect(ended.state == .completed, "\(ended)")
    }
}

/// SplitMix64: the same kill moments for the same seed.
struct SeededRandom: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
