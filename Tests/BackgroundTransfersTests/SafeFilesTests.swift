import BackgroundTransfers
import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The file moves and opens transfers rely on, on a real file system: nothing is replaced that
/// was not meant to be, and no link leads out of the place meant.
/// A class, so each test's directory goes with it (`deinit`).
final class SafeFilesTests {
    let directory: String = {
        let path = FileManager.default.temporaryDirectory.path + "/safefiles-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }()

    deinit { try? FileManager.default.removeItem(atPath: directory) }

    func write(_ text: String, to path: String) throws { try Data(text.utf8).write(to: URL(fileURLWithPath: path)) }
    func read(_ path: String) throws -> String { try String(contentsOfFile: path, encoding: .utf8) }

    /// A directory made a link (an app may write its container, where its transfers are) takes
    /// no write and no move elsewhere: the link in the directory's own name is not followed.
    @Test func aLinkedDirectoryTakesNoWriteAndNoMove() throws {
        let elsewhere = directory + "/elsewhere"
        try FileManager.default.createDirectory(atPath: elsewhere + "/sub", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory + "/real", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: directory + "/linked", withDestinationPath: elsewhere)
        try write("download", to: directory + "/real/1.partial")

        #expect(SafeFiles.openForWriting(directory + "/linked/1.partial") == -1)
        #expect(errno == ELOOP || errno == ENOTDIR, "\(errno)")
        for replacing in [true, false] {
            #expect(throws: SafeFiles.Refusal.self) {
                try SafeFiles.moveIntoPlace(
                    directory + "/real/1.partial", to: directory + "/linked/1-f.desktop", replacing: replacing)
            }
        }
        #expect(throws: SafeFiles.Refusal.self) {
            try SafeFiles.copy(from: open("/dev/null", O_RDONLY), to: directory + "/linked/2.upload")
        }
        #expect(try FileManager.default.contentsOfDirectory(atPath: elsewhere) == ["sub"], "nothing reached it")
        // A real directory, and a link above the one written (the operator's, resolved), are fine.
        let file = SafeFiles.openForWriting(directory + "/real/3.partial")
        #expect(file >= 0)
        close(file)
        try SafeFiles.moveIntoPlace(directory + "/real/1.partial", to: directory + "/real/1-f", replacing: true)
        #expect(try read(directory + "/real/1-f") == "download")
        let through = SafeFiles.openForWriting(directory + "/linked/sub/4.partial")
        #expect(through >= 0)
        close(through)
    }

    /// A FIFO an app put where bgd writes (a partial download's name is `<id>.partial`, and ids
    /// are easy to guess) is refused at once, with or without a reader, not waited on: before,
    /// opening it held bgd's thread until something read it.
    @Test func aFIFOInPlaceOfAFileIsRefusedAtOnce() throws {
        let fifo = directory + "/7.partial"
        #expect(mkfifo(fifo, 0o600) == 0)
        #expect(SafeFiles.openForWriting(fifo) == -1, "no reader")
        #expect(errno == ENXIO, "\(errno)")
        let reader = open(fifo, O_RDONLY | O_NONBLOCK)
        defer { close(reader) }
        #expect(SafeFiles.openForWriting(fifo, truncating: true) == -1, "a reader")
        #expect(errno == EINVAL, "\(errno)")
        let empty = open("/dev/null", O_RDONLY)
        defer { close(empty) }
        #expect(throws: SafeFiles.Refusal.self) { try SafeFiles.copy(from: empty, to: fifo) }
        // A plain file is opened as before, blocking.
        let file = SafeFiles.openForWriting(directory + "/8.partial")
        #expect(file >= 0 && fcntl(file, F_GETFL) & O_NONBLOCK == 0)
        close(file)
    }

    /// Reads, sizes and removals of bgd's files go through neither a link in the file's name
    /// nor in its directory's; a read refuses a file with a second name (a hard link).
    @Test func readsAndRemovalsFollowNoLink() throws {
        let elsewhere = directory + "/elsewhere"
        try FileManager.default.createDirectory(atPath: elsewhere, withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: directory + "/real", withIntermediateDirectories: true)
        try write("secret", to: elsewhere + "/1.upload")
        try FileManager.default.createSymbolicLink(atPath: directory + "/linked", withDestinationPath: elsewhere)
        try FileManager.default.createSymbolicLink(
            atPath: directory + "/real/2.upload", withDestinationPath: elsewhere + "/1.upload")
        try FileManager.default.linkItem(atPath: elsewhere + "/1.upload", toPath: directory + "/real/3.upload")
        try write("mine", to: directory + "/real/4.upload")

        for refused in ["linked/1.upload", "real/2.upload", "real/3.upload", "real/5.upload"] {
            #expect(throws: SafeFiles.Refusal.self, "\(refused)") {
                try SafeFiles.openForReading(directory + "/" + refused)
            }
        }
        #expect(SafeFiles.size(of: directory + "/linked/1.upload") == nil)
        #expect(SafeFiles.size(of: directory + "/real/2.upload") == nil)
        let (file, size) = try SafeFiles.openForReading(directory + "/real/4.upload")
        close(file)
        #expect(size == 4 && SafeFiles.size(of: directory + "/real/4.upload") == 4)

        #expect(!SafeFiles.remove(directory + "/linked/1.upload"))
        #expect(SafeFiles.remove(directory + "/real/2.upload"), "the link goes")
        #expect(try read(elsewhere + "/1.upload") == "secret", "what it named stays")
        // Nor is a file with a second name written or cut.
        #expect(SafeFiles.openForWriting(directory + "/real/3.upload", truncating: true) == -1 && errno == EMLINK)
        #expect(throws: SafeFiles.Refusal.self) {
            try SafeFiles.copy(from: open("/dev/null", O_RDONLY), to: directory + "/real/3.upload")
        }
        #expect(try read(elsewhere + "/1.upload") == "secret")
        try FileManager.default.createDirectory(
            atPath: directory + "/real/6.partial", withIntermediateDirectories: true)
        #expect(!SafeFiles.remove(directory + "/real/6.partial"), "never a directory")
        #expect(
            SafeFiles.remove(directory + "/real/4.upload") && SafeFiles.size(of: directory + "/real/4.upload") == nil)
    }

    @Test func aMoveThatMayNotReplaceLeavesWhatAppearedThere() throws {
        try write("download", to: directory + "/partial")
        try write("planted", to: directory + "/target")
        #expect(throws: SafeFiles.Refusal.self) {
            try SafeFiles.moveIntoPlace(directory + "/partial", to: directory + "/target", replacing: false)
        }
        #expect(try read(directory + "/target") == "planted")
        #expect(try read(directory + "/partial") == "download", "the download is kept for a later try")
        // A planted link is something too: not followed, not replaced.
        try FileManager.default.createSymbolicLink(
            atPath: directory + "/link", withDestinationPath: directory + "/elsewhere")
        #expect(throws: SafeFiles.Refusal.self) {
            try SafeFiles.moveIntoPlace(directory + "/partial", to: directory + "/link", replacing: false)
        }
        #expect(!FileManager.default.fileExists(atPath: directory + "/elsewhere"))
    }

    @Test func aMoveCutBetweenLinkAndUnlinkFinishesOnTheNextTry() throws {
        try write("download", to: directory + "/partial")
        // What a crash after link() and before unlink() leaves: two names on one file.
        #expect(link(directory + "/partial", directory + "/target") == 0)
        try SafeFiles.moveIntoPlace(directory + "/partial", to: directory + "/target", replacing: false)
        #expect(try read(directory + "/target") == "download")
        #expect(!FileManager.default.fileExists(atPath: directory + "/partial"))
    }

    @Test func openingBeneathARootFollowsNoLinkAndNoDotDot() throws {
        let root = directory + "/container"
        try FileManager.default.createDirectory(atPath: root + "/a", withIntermediateDirectories: true)
        try write("inside", to: root + "/a/file")
        try write("outside", to: directory + "/secret")
        try FileManager.default.createSymbolicLink(atPath: root + "/up", withDestinationPath: directory)
        try FileManager.default.createSymbolicLink(
            atPath: root + "/a/secret", withDestinationPath: directory + "/secret")
        let cases: [(String, String)] = [
            (directory + "/secret", "outsideContainer"), (root + "/../secret", "invalidPath"),
            (root + "//a/file", "invalidPath"),
            (root + "/up/secret", "linkRefused"), (root + "/a/secret", "linkRefused"), (root + "/a", "notRegularFile"),
            (root + "/missing", "unreadable"),
        ]
        for (path, code) in cases {
            #expect(throws: SafeFiles.Refusal.self, "\(path)") {
                do {
                    let descriptor = try SafeFiles.openBeneath(root, path: path)
                    close(descriptor)
                } catch {
                    #expect((error as? SafeFiles.Refusal)?.code.rawValue == code, "\(path): \(error)")
                    throw error
                }
            }
        }
        let descriptor = try SafeFiles.openBeneath(root, path: root + "/a/file")
        defer { close(descriptor) }
        try SafeFiles.copy(from: descriptor, to: directory + "/copy")
        #expect(try read(directory + "/copy") == "inside")
    }

    /// An upload is the file as it was when it was made: bytes its app appends while bgd copies
    /// it are not copied (with a quota, the reservation was for the size then; before, a file
    /// kept growing was copied without end).
    @Test func aCopyStopsAtTheSizeItWasGiven() throws {
        let source = directory + "/growing"
        try Data(repeating: 7, count: 100_000).write(to: URL(fileURLWithPath: source))
        let descriptor = open(source, O_RDONLY)
        defer { close(descriptor) }
        let appended = try FileHandle(forWritingTo: URL(fileURLWithPath: source))
        try appended.seekToEnd()
        try appended.write(contentsOf: Data(repeating: 8, count: 50_000))
        try appended.close()
        try SafeFiles.copy(from: descriptor, to: directory + "/copy", limit: 100_000)
        let copied = try Data(contentsOf: URL(fileURLWithPath: directory + "/copy"))
        #expect(copied == Data(repeating: 7, count: 100_000))
    }
}
