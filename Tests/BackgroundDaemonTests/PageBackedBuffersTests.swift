import BackgroundGateway
import Foundation
import NIOCore
import NIOEmbedded
import Testing

/// The relay's uplink buffers (`PageBackedBuffers`): bytes kept exactly as the heap's would be,
/// and a large buffer resident only where it was written — also after a copy on write, which
/// copies the whole slice.
struct PageBackedBuffersTests {
    let allocator = PageBackedBuffers.allocator

    /// How many of the pages under `buffer`'s storage are resident (mincore).
    func residentPages(_ buffer: ByteBuffer) -> Int {
        buffer.withVeryUnsafeBytes { bytes in
            let page = Int(sysconf(Int32(_SC_PAGESIZE)))
            let start = UnsafeMutableRawPointer(mutating: bytes.baseAddress!)  // the mapping's first byte
            #expect(Int(bitPattern: start) % page == 0, "a large buffer is a mapping of its own")
            let pages = (buffer.capacity + page - 1) / page
            var vector = [UInt8](repeating: 0, count: pages)
            #expect(mincore(start, pages * page, &vector) == 0)
            return vector.filter { $0 & 1 == 1 }.count
        }
    }

    @Test func bytesSurviveGrowthAndCopiesAtEverySize() {
        for size in [1, 100, 8_000, 8_192, 32_768, 70_000] {
            var buffer = allocator.buffer(capacity: size)
            let bytes = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
            buffer.writeBytes(bytes)
            var copy = buffer  // copy on write on the next write
            copy.writeBytes([1, 2, 3])
            buffer.writeBytes(bytes)  // grows past its capacity
            #expect(Array(copy.readableBytesView) == bytes + [1, 2, 3], "size \(size)")
            #expect(Array(buffer.readableBytesView) == bytes + bytes, "size \(size)")
        }
    }

    @Test func aLargeBufferIsResidentOnlyWhereWrittenEvenAfterACopy() {
        var buffer = allocator.buffer(capacity: 32_768)
        buffer.writeBytes([UInt8](repeating: 0xAB, count: 300))
        #expect(residentPages(buffer) == 1)
        // A second reference, then a write: ByteBuffer copies all 32 KB of the slice.
        buffer.moveWriterIndex(to: 0)
        let held = buffer
        buffer.moveWriterIndex(to: 32_000)
        buffer.setBytes([1], at: 40)
        #expect(residentPages(buffer) == 1, "the copy left the unwritten pages unwritten")
        #expect(buffer.getBytes(at: 0, length: 40) == [UInt8](repeating: 0xAB, count: 40))
        #expect(buffer.getInteger(at: 40, as: UInt8.self) == 1 && buffer.getInteger(at: 300, as: UInt8.self) == 0)
        // A page written far in is copied too.
        buffer.setBytes([7], at: 20_000)
        var again = buffer
        again.setBytes([8], at: 0)
        #expect(again.getInteger(at: 20_000, as: UInt8.self) == 7 && residentPages(again) == 2)
        _ = held
    }

    @Test func releasedPagesReadAsZeroCostNothingAndComeBackWhenWritten() {
        var buffer = allocator.buffer(capacity: 32_768)
        buffer.writeBytes([UInt8](repeating: 0xCD, count: 10_000))
        #expect(residentPages(buffer) == 3)
        buffer.moveReaderIndex(to: buffer.writerIndex)  // consumed
        #expect(PageBackedBuffers.releasePages(of: buffer))
        #expect(residentPages(buffer) == 0)
        buffer.clear()
        buffer.writeBytes([1, 2, 3])
        #expect(Array(buffer.readableBytesView) == [1, 2, 3] && residentPages(buffer) == 1)
        // A buffer from the heap is left as it is.
        var small = allocator.buffer(capacity: 100)
        small.writeBytes([9, 9, 9])
        #expect(!PageBackedBuffers.releasePages(of: small))
        #expect(Array(small.readableBytesView) == [9, 9, 9])
    }

    /// Between the socket and NIOSSL: a record's pages go back once the socket has written it.
    @Test func aWrittenRecordGivesItsPagesBack() throws {
        let channel = EmbeddedChannel(handler: WrittenRecordPages())
        var record = allocator.buffer(capacity: 16_384)
        record.writeBytes([UInt8](repeating: 0x17, count: 5_000))
        let held = record  // the same storage, to look at after the write
        let written = channel.eventLoop.makePromise(of: Void.self)
        var kept = false
        written.futureResult.whenSuccess { kept = true }
        channel.write(record, promise: written)
        #expect(residentPages(held) == 2, "not yet written")
        channel.flush()
        #expect(kept, "the caller's promise is kept")
        #expect(residentPages(held) == 0)
        channel.writeAndFlush(allocator.buffer(capacity: 16_384), promise: nil)  // with no promise of its own too
        _ = try channel.finish()
    }
}
