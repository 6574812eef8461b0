import Foundation
import NIOCore

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A download's bytes on disk, written straight from the network buffers (no copy into `Data`)
/// and synced at checkpoints: after `sync()` returns, the bytes before `offset` survive a crash
/// of bgd and a loss of power.
struct PartialFile: ~Copyable {
    private let descriptor: Int32
    private(set) var offset: Int64

    struct Failure: Error, CustomStringConvertible {
        var operation: String
        var code: Int32
        var description: String { "\(operation): \(String(cString: strerror(code)))" }
    }

    /// Opens (creating, 0600) `path` for writing at `offset`, cutting off anything after it:
    /// bytes past the durable checkpoint were never promised and may be garbage after a crash.
    init(path: String, offset: Int64) throws {
        // Neither the file nor its directory followed if a link: an app's is in its container.
        let descriptor = SafeFiles.openForWriting(path)
        guard descriptor >= 0 else { throw Failure(operation: "open \(path)", code: errno) }
        guard ftruncate(descriptor, off_t(offset)) == 0, lseek(descriptor, off_t(offset), SEEK_SET) >= 0 else {
            let code = errno
            close(descriptor)
            throw Failure(operation: "truncate \(path)", code: code)
        }
        self.descriptor = descriptor
        self.offset = offset
    }

    deinit { close(descriptor) }

    mutating func write(_ buffer: ByteBuffer) throws {
        try buffer.withUnsafeReadableBytes { bytes in
            var done = 0
            while done < bytes.count {
                let written = systemWrite(descriptor, bytes.baseAddress! + done, bytes.count - done)
                if written < 0 {
                    if errno == EINTR { continue }
                    throw Failure(operation: "write", code: errno)
                }
                done += written
            }
        }
        offset += Int64(buffer.readableBytes)
    }

    /// fsync: the bytes written so far are on disk. An error here is never retried and trusted
    /// (fsyncgate): the caller drops back to the last checkpoint.
    func sync() throws {
        guard fsync(descriptor) == 0 else { throw Failure(operation: "fsync", code: errno) }
    }

}

private func systemWrite(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int {
    #if canImport(Glibc)
        Glibc.write(descriptor, bytes, count)
    #else
        Darwin.write(descriptor, bytes, count)
    #endif
}
