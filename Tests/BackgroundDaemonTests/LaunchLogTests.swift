import BackgroundDaemon
import BackgroundTesting
import Foundation
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
}
