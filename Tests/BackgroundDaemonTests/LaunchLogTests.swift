import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Logging
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// An app's launch log: appended to while small, rotated once past its limit, and made anew
/// when the app left something else at its path (ConfinementTests launches through it).
struct LaunchLogTests {
    let directory = TemporaryDirectory.make()
    var path: String { directory + "/launch.log" }

    func append(_ text: String, limit: Int64 = LaunchLog.limit) throws {
        let descriptor = try #require(LaunchLog.descriptor(at: path, limit: limit))
        defer { close(descriptor) }
        #expect(fcntl(descriptor, F_GETFL) & O_NONBLOCK == 0, "the app's output blocks as a file's does")
        #expect(fcntl(descriptor, F_GETFD) & FD_CLOEXEC != 0, "nothing else bgd starts inherits it")
        _ = text.withCString { write(descriptor, $0, strlen($0)) }
    }

    func contents(_ file: String) -> String? { try? String(contentsOfFile: file, encoding: .utf8) }

    @Test func aSmallLogIsAppendedToAndALargeOneRotated() throws {
        try append("one\n", limit: 8)
        try append("two\n", limit: 8)
        #expect(contents(path) == "one\ntwo\n")
        #expect(contents(path + ".1") == nil)
        try append("three\n", limit: 8)  // 8 bytes were not past the limit: still appended
        #expect(contents(path) == "one\ntwo\nthree\n")
        try append("four\n", limit: 8)  // 14 are: the next launch starts a new file
        #expect(contents(path) == "four\n")
        #expect(contents(path + ".1") == "one\ntwo\nthree\n")
        try append("five\n", limit: 4)
        #expect(contents(path + ".1") == "four\n", "one generation is kept")
        #expect(contents(path) == "five\n")
        let mode = try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int
        #expect(mode == 0o600)
    }

    @Test func whatTheAppLeftInItsPlaceIsReplaced() throws {
        let outside = directory + "/outside"
        try Data("kept\n".utf8).write(to: URL(fileURLWithPath: outside))
        symlink(outside, path)
        try append("mine\n")
        #expect(contents(outside) == "kept\n")
        #expect(contents(path) == "mine\n")
        unlink(path)
        mkfifo(path, 0o600)
        try append("again\n")  // returns at once: no reader is waited for
        #expect(contents(path) == "again\n")
        // A rotated log goes over whatever is at .1, following nothing.
        symlink(outside, path + ".1")
        try append(String(repeating: "x", count: 20) + "\n", limit: 8)
        try append("new\n", limit: 8)
        #expect(contents(outside) == "kept\n")
        #expect(contents(path) == "new\n")
    }

    @Test func aDirectoryAtTheRotatedNameKeepsTheLogWhereItIs() throws {
        try FileManager.default.createDirectory(atPath: path + ".1/inside", withIntermediateDirectories: true)
        try append("0123456789\n", limit: 4)
        try append("more\n", limit: 4)
        #expect(contents(path) == "0123456789\nmore\n", "not rotated, not lost")
    }

    @Test func aDirectoryInItsPlaceSendsTheOutputNowhere() throws {
        try FileManager.default.createDirectory(atPath: path + "/inside", withIntermediateDirectories: true)
        #expect(LaunchLog.descriptor(at: path) == nil)
        #expect(FileManager.default.fileExists(atPath: path + "/inside"), "the app's files are not removed")
    }

    @Test func aLogWrittenToWhileTheAppRunsIsTrimmedToItsLastPart() throws {
        try Data(String(repeating: "a", count: 20).utf8).write(to: URL(fileURLWithPath: path))
        let descriptor = try #require(LaunchLog.descriptor(at: path, limit: 100))
        defer { close(descriptor) }
        #expect(fcntl(descriptor, F_GETFL) & O_ACCMODE == O_WRONLY, "the app cannot read through its output")
        let reader = try #require(LaunchLog.reader(of: descriptor, at: path))
        defer { close(reader) }
        func keep() -> Bool { LaunchLog.keepWithin(100, descriptor: descriptor, reader: reader, path: path) }
        #expect(!keep(), "within the limit: left alone")
        _ = String(repeating: "b", count: 200).withCString { write(descriptor, $0, 200) }
        #expect(keep())
        #expect(contents(path + ".1") == String(repeating: "b", count: 100), "the last 100 bytes are kept")
        _ = "next\n".withCString { write(descriptor, $0, 5) }
        #expect(contents(path) == "next\n", "the process's next line starts the emptied log")
        // Over whatever the app put at .1, following nothing; and emptied even where .1 cannot be made.
        let outside = directory + "/outside"
        try Data("kept\n".utf8).write(to: URL(fileURLWithPath: outside))
        unlink(path + ".1")
        symlink(outside, path + ".1")
        _ = String(repeating: "c", count: 200).withCString { write(descriptor, $0, 200) }
        #expect(keep())
        #expect(contents(outside) == "kept\n")
        #expect(contents(path + ".1") == String(repeating: "c", count: 100))
        unlink(path + ".1")
        try FileManager.default.createDirectory(atPath: path + ".1/inside", withIntermediateDirectories: true)
        _ = String(repeating: "d", count: 200).withCString { write(descriptor, $0, 200) }
        #expect(keep())
        #expect(contents(path) == "", "bounded before kept")
        // A name that no longer leads to the file gives no reader.
        unlink(path)
        try Data("other".utf8).write(to: URL(fileURLWithPath: path))
        #expect(LaunchLog.reader(of: descriptor, at: path) == nil)
    }

    /// A hard link the app made at `launch.log` to a file of its user's (bgd's database, a
    /// dotfile) is someone else's file: replaced, not appended to, never cut.
    @Test func aHardLinkInItsPlaceIsReplaced() throws {
        let outside = directory + "/outside"
        try Data("kept\n".utf8).write(to: URL(fileURLWithPath: outside))
        #expect(link(outside, path) == 0)
        try append("mine\n")
        #expect(contents(outside) == "kept\n")
        #expect(contents(path) == "mine\n")
    }

    /// One long run (or a process suspended and resumed for weeks) keeps the log it was given at
    /// launch: the supervisor bounds it while the process lives, once a minute of the clock while
    /// it runs, and has no timer for it once no process it launched is left.
    @Test func theSupervisorBoundsTheLogOfAProcessThatLivesOn() async throws {
        let fifo = directory + "/go"
        #expect(mkfifo(fifo, 0o600) == 0)
        let clock = ManualClock()
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let supervisor = ProcessSupervisor(
            mode: .signals("test"), launcher: ProcessLauncher(), clock: clock, killGrace: .seconds(1), logger: logger)
        // 3 MB of output, then a line once the test says so, then alive until ended.
        let script = "head -c 3000000 /dev/zero | tr '\\0' x; read line < \(fifo); echo after; exec sleep 600"
        let spec = LaunchSpec(
            command: LaunchCommand(["/bin/sh", "-c", script])!, environment: ["PATH": "/usr/bin:/bin"],
            workingDirectory: directory, logFile: path)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await supervisor.run() }
            defer { group.cancelAll() }
            let process = try await supervisor.launch(spec, for: AppID(rawValue: "com.example.chatty")!)
            #expect(await eventually { self.size(of: path) == 3_000_000 })
            #expect(await eventually { clock.nextDeadline == clock.now.adding(LaunchLog.checkInterval) })
            clock.advance(by: LaunchLog.checkInterval)
            #expect(await eventually { self.size(of: path) == 0 })
            #expect(size(of: path + ".1") == LaunchLog.limit)
            #expect(contents(path + ".1")?.allSatisfy { $0 == "x" } == true)
            let go = open(fifo, O_WRONLY)
            _ = write(go, "go\n", 3)
            close(go)
            #expect(await eventually { self.size(of: path) == 6 })
            let small = size(of: path).map { $0 < 100 } == true ? contents(path) : "(large)"
            #expect(small == "after\n", "the process writes on, from the start")
            #expect(await supervisor.phase(of: process.processID) == .running)
            await supervisor.kill(process.processID)
            #expect(await eventually { clock.nextDeadline == nil }, "no process left to look at: no timer")
        }
    }

    func size(of file: String) -> Int64? {
        var status = stat()
        return stat(file, &status) == 0 ? Int64(status.st_size) : nil
    }
}
