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
        try await withDaemonOnVolume(size: "4m") { _, state, socket, daemon in
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

    /// An upload's copy that fills the state volume is the disk's trouble, not the request's:
    /// 507 `storageFull`, as a full store answers, and no part of the copy stays. Before, it
    /// answered 400 `fileError`, which tells a client not to send the same request again.
    @Test func anUploadTheStateVolumeCannotHoldIsRefusedAsStorageFull() async throws {
        try await withDaemonOnVolume(size: "8m") { directory, state, socket, daemon in
            // Outside the volume: 6 MB, where 2 MB are left.
            let source = directory + "/report.bin"
            try Data(repeating: 7, count: 6 << 20).write(to: URL(fileURLWithPath: source))
            let filler = state + "/filler"
            let descriptor = open(filler, O_WRONLY | O_CREAT, 0o600)
            let chunk = [UInt8](repeating: 7, count: 64 << 10)
            while chunk.withUnsafeBytes({ write(descriptor, $0.baseAddress, chunk.count) }) > 0 {}
            #expect(ftruncate(descriptor, lseek(descriptor, 0, SEEK_END) - (2 << 20)) == 0)
            close(descriptor)
            func submit() async throws -> RawHTTP.Answer {
                let body = try WireCoding.makeEncoder().encode(
                    TransferRequest(
                        session: "reports", kind: .upload, url: URL(string: "http://127.0.0.1:9/up")!,
                        uploadFile: source))
                return try await RawHTTP.request(socket, .POST, "/v1/transfers", body: body)
            }
            let refused = try await submit()
            #expect(
                refused.status == 507 && refused.errorCode == "storageFull",
                "\(refused.status) \(refused.errorCode ?? "")")
            let left = try FileManager.default.contentsOfDirectory(atPath: state + "/transfers")
            #expect(left.isEmpty, "the copy left \(left)")
            unlink(filler)
            #expect(try await submit().status == 201)
            daemon.signal(SIGTERM)
            #expect(await daemon.waitForExit() == 0)
        }
    }

    /// An app's answer that bgd takes but cannot write (a full disk) is said as the disk's trouble
    /// (507), not as "already ended" — which told the app to acknowledge its event and forget
    /// it — and is written once space is back, here by the graceful shutdown. Before, a
    /// shutdown dropped it, and the next bgd recorded the run as interrupted and made it up.
    @Test func anAnswerTheDiskCannotTakeIsHeldAndWrittenBeforeShutdown() async throws {
        try await withDaemonOnVolume(size: "4m") { _, state, socket, daemon in
            let (registered, run, stream) = try await connectedAppWithAFetch(socket: socket)
            let filler = try await fillUp(state, socket: socket)
            let answer = try await RawHTTP.request(
                socket, .POST, "/v1/app/runs/\(run.id)/result",
                body: try WireCoding.makeEncoder().encode(FetchResultReport(result: .newData)), token: registered.token)
            #expect(
                answer.status == 507 && answer.errorCode == "storageFull", "\(answer.status) \(answer.errorCode ?? "")")

            // Space again, and bgd stops at once (before its retry, five seconds on).
            unlink(filler)
            daemon.signal(SIGTERM)
            #expect(await daemon.waitForExit() == 0)
            let store = try BackgroundStore.open(atPath: state + "/bgd.sqlite")
            #expect(try await store.run(run.id)?.outcome == .newData, "the answer the app gave stands")
            #expect(try await store.openEvents(for: registered.app.id).isEmpty, "its event settled with the run")
            _ = stream
        }
    }

    /// A run that expires while the disk is full has its end held; the app's answer that comes
    /// after does not replace it (the first end stands) and is told so (409, "expired"), not
    /// that its answer is held (507). Space again: the expiry is what is written.
    @Test func aLateAnswerDoesNotReplaceAnExpiryTheDiskCouldNotTakeYet() async throws {
        try await withVolume(size: "4m") { directory in
            try await TestDaemon.with(directory: directory) { daemon in
                let state = directory + "/state"
                var (registered, run, stream) = try await connectedAppWithAFetch(socket: daemon.socketPath)
                let filler = try await fillUp(state, socket: daemon.socketPath)
                daemon.clock.advance(by: .seconds(30))  // the budget is over: expired, and held
                // Its `expire` comes as bgd ends the run: the answer is sent after it.
                var expired = false
                while !expired, let message = try await stream.next() {
                    if case .control(.expire) = message { expired = true }
                }
                #expect(expired)
                let late = try await RawHTTP.request(
                    daemon.socketPath, .POST, "/v1/app/runs/\(run.id)/result",
                    body: try WireCoding.makeEncoder().encode(FetchResultReport(result: .newData)),
                    token: registered.token)
                #expect(
                    late.status == 409 && late.errorCode == "runAlreadyEnded", "\(late.status) \(late.errorCode ?? "")")
                #expect(String(decoding: late.body, as: UTF8.self).contains("expired"))
                unlink(filler)
                #expect(
                    try await eventuallyAsync {
                        daemon.clock.advance(by: .seconds(1))  // the held end's retry
                        return try await daemon.store.run(run.id)?.outcome != nil
                    })
                #expect(try await daemon.store.run(run.id)?.outcome == .expired)
                _ = (registered, run)
            }
        }
    }

    /// An app registered with bgd at `socket` and connected, and a fetch run bgd gave it.
    func connectedAppWithAFetch(socket: String) async throws -> (RegisteredApp, RunRecord, StreamMessages.Iterator) {
        let admin = DaemonClient(socketPath: socket)
        let registered = try await admin.send(
            .post, "/v1/apps",
            body: RegisterAppRequest(
                id: AppID(rawValue: "com.example.full")!, launchCommand: LaunchCommand(["/bin/false"])!,
                fetchInterval: .never),
            as: RegisteredApp.self)
        // The app, connected: the fetch's event comes on its stream.
        let app = DaemonClient(socketPath: socket, token: registered.token)
        var messages = try await app.stream("/v1/app/events").makeAsyncIterator()
        _ = try await messages.next()  // hello
        let run = try await admin.send(.post, "/v1/apps/com.example.full/fetch", as: RunRecord.self)
        var seen: StreamMessage?
        while seen == nil {
            guard let message = try await messages.next() else { break }
            if case .event = message { seen = message }
        }
        #expect(seen != nil, "the fetch's event reached the app")
        return (registered, run, messages)
    }

    /// Fills the volume of `state` up, to the last page SQLite's log had room for (bgd at
    /// `socket` refuses a registration with 507); returns the filler file, to unlink for space.
    func fillUp(_ state: String, socket: String) async throws -> String {
        let filler = state + "/filler"
        let descriptor = open(filler, O_WRONLY | O_CREAT, 0o600)
        let chunk = [UInt8](repeating: 7, count: 64 << 10)
        while chunk.withUnsafeBytes({ write(descriptor, $0.baseAddress, chunk.count) }) > 0 {}
        close(descriptor)
        var full = false
        for index in 0..<300 where !full {
            let body = try WireCoding.makeEncoder().encode(
                RegisterAppRequest(
                    id: AppID(rawValue: "com.example.filler\(index)")!, launchCommand: LaunchCommand(["/bin/true"])!))
            full = try await RawHTTP.request(socket, .POST, "/v1/apps", body: body).status == 507
        }
        #expect(full)
        return filler
    }

    /// A real bgd on a state volume of its own of `size` (a tmpfs: root, here and in CI),
    /// unmounted whatever happens.
    func withDaemonOnVolume(
        size: String,
        _ body: (_ directory: String, _ state: String, _ socket: String, _ daemon: DaemonProcess) async throws -> Void
    ) async throws {
        let directory = TemporaryDirectory.make()
        let state = directory + "/state"
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        try await withVolume(size: size, at: state) { _ in
            let socket = directory + "/bgd.sock"
            let daemon = try await DaemonProcess(
                stateDirectory: state, socketPath: socket, arguments: ["--push-port", "off"])
            try await body(directory, state, socket, daemon)
        }
    }

    /// A tmpfs of `size` mounted at `path` (a new directory when nil) for `body`, unmounted
    /// whatever happens.
    func withVolume(size: String, at path: String? = nil, _ body: (String) async throws -> Void) async throws {
        let path = path ?? TemporaryDirectory.make()
        let mount = try await Command.run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size)", "tmpfs", path])
        guard mount.status == 0 else {
            Issue.record("cannot mount a tmpfs for the state (needs root): \(mount.standardError)")
            return
        }
        defer { _ = umount2(path, Int32(MNT_DETACH)) }
        try await body(path)
    }
}
