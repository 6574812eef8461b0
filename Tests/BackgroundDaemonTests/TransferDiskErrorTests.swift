import Background
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// D4 for the last step of a download: the sync of the directory its file was renamed into. A
/// real bgd runs under the chaos campaign's fsync shim (`Chaos/fsync_eio.c`), armed to fail only
/// directories' syncs: the download is not reported done while its name may not survive a crash,
/// and completes — verified and moved anew — once syncs succeed again. Before, the failed sync
/// was ignored and the completion reported.
@Suite(.timeLimit(.minutes(3)))
struct TransferDiskErrorTests {
    static let checkout = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test func aDownloadWhoseNameCannotBeSyncedIsNotReportedDone() async throws {
        let directory = TemporaryDirectory.make()
        let shim = directory + "/fsync_eio.so"
        let built = try await Command.run(
            "/usr/bin/env",
            ["cc", "-shared", "-fPIC", "-O2", "-o", shim, Self.checkout.path + "/Chaos/fsync_eio.c", "-ldl"])
        try #require(built.status == 0, "cannot build the fsync shim: \(built)")
        let origin = try await FaultyOrigin.start()
        defer { Task { await origin.stop() } }
        let (state, socket, trigger) = (directory + "/state", directory + "/bgd.sock", directory + "/eio")
        let daemon = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, arguments: ["--conditions", "unconstrained"],
            environment: ["LD_PRELOAD": shim, "CHAOS_FSYNC_EIO": trigger, "CHAOS_FSYNC_EIO_ONLY": "directories"])
        let admin = DaemonClient(socketPath: socket)
        let destination = directory + "/file.bin"
        FileManager.default.createFile(atPath: trigger, contents: nil)
        let size = 200_000
        let record = try await admin.send(
            .post, "/v1/transfers",
            body: TransferRequest(session: "operator", url: origin.url(seed: 41, size: size), destination: destination),
            as: TransferRecord.self)

        // Every byte is in, the rename is made, its sync fails: a retry, not a completion.
        var (seen, asked) = (record, 0)
        while seen.lastError == nil, seen.state != .completed, asked < 120 {
            seen = try await admin.send(.get, "/v1/transfers/\(record.id)?wait=1", as: TransferRecord.self)
            asked += 1
        }
        #expect(seen.state != .completed, "\(seen)")
        #expect(seen.lastError?.contains("syncing \(directory) failed") == true, "\(seen)")
        #expect(!FileManager.default.fileExists(atPath: destination), "the download was left under its name")

        // Syncs work again: the next attempt moves it into place, and it is done.
        try FileManager.default.removeItem(atPath: trigger)
        let ended = try await admin.send(
            .get, "/v1/transfers/\(record.id)?wait=60", as: TransferRecord.self, timeout: .seconds(70))
        #expect(ended.state == .completed, "\(ended)")
        #expect(
            FaultyOrigin.sha256Digest(of: try Data(contentsOf: URL(fileURLWithPath: destination)))
                == FaultyOrigin.sha256(seed: 41, size: size))
        daemon.signal(SIGTERM)
        _ = await daemon.waitForExit()
    }
}
