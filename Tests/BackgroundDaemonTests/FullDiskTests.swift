import Background
import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The state volume fills up (reliability-matrix D12, probe S2/D9): new work is refused with
/// 507 and a reason, reads keep working, nothing stored is lost, bgd never crashes — and takes
/// work again once space is freed.
@Suite(.timeLimit(.minutes(5)))
struct FullDiskTests {
    @Test func aFullStateVolumeRefusesNewWorkAndKeepsServing() async throws {
        let directory = TemporaryDirectory.make()
        let state = directory + "/state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        // A small volume of our own (root: here and in CI). Unmounted whatever happens.
        let mount = try await Command.run("/bin/mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", state])
        guard mount.status == 0 else {
            Issue.record("cannot mount a tmpfs for the state (needs root): \(mount.standardError)")
            return
        }
        defer { _ = umount2(state, Int32(MNT_DETACH)) }
        let socket = directory + "/bgd.sock"
        let daemon = try await DaemonProcess(
            stateDirectory: state, socketPath: socket, arguments: ["--push-port", "off"])
        let admin = DaemonClient(socketPath: socket)
        func register(_ id: String) async throws -> RawHTTP.Answer {
            let body = try WireCoding.makeEncoder().encode(
                RegisterAppRequest(id: AppID(rawValue: id)!, launchCommand: LaunchCommand(["/bin/true"])!))
            return try await RawHTTP.request(socket, .POST, "/v1/apps", body: body)
        }
        #expect(try await register("com.example.before").status == 201)

        // Fill the volume to the last byte.
        let filler = state + "/filler"
        let descriptor = open(filler, O_WRONLY | O_CREAT, 0o600)
        let chunk = [UInt8](repeating: 7, count: 64 << 10)
        while chunk.withUnsafeBytes({ write(descriptor, $0.baseAddress, chunk.count) }) > 0 {}
        close(descriptor)

        // Writes are refused with 507 and a reason (SQLite may still have room in its WAL for a
        // few): never a 500, never a crash.
        var statuses: [Int] = []
        for index in 0..<300 where !statuses.contains(507) {
            let answer = try await register("com.example.full\(index)")
            statuses.append(answer.status)
            if answer.status == 507 {
                #expect(answer.errorCode == "storageFull")
                #expect(String(decoding: answer.body, as: UTF8.self).contains("Free some space"))
            }
        }
        #expect(statuses.contains(507), "refused once the disk was full: \(Set(statuses))")
        #expect(Set(statuses).isSubset(of: [201, 507]), "only taken or refused: \(Set(statuses))")
        // Reads still work, and what was stored is there.
        let apps = try await admin.send(.get, "/v1/apps", as: [AppSummary].self)
        #expect(apps.contains { $0.id.rawValue == "com.example.before" })
        #expect(kill(daemon.processID, 0) == 0, "bgd is still running")

        // Space again: work is taken again.
        unlink(filler)
        #expect(try await register("com.example.after").status == 201)
        daemon.signal(SIGTERM)
        #expect(await daemon.waitForExit() == 0)
        let store = try BackgroundStore.open(atPath: state + "/bgd.sqlite")
        #expect(try await store.integrityCheck() == "ok")
        #expect(try await store.app(AppID(rawValue: "com.example.after")!) != nil)
    }
}
