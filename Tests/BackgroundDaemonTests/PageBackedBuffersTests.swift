import BackgroundGateway
import Foundation
import NIOCore
import Testing

/// The relay's uplink buffers (`PageBackedBuffers`): bytes kept exactly as the heap's would be,
/// and a large buffer resident only where it was written — also after a copy on write, which
/// copies the whole slice.
struct PageBackedBuffersTests {
    let allocator = PageBackedBuffers.allocator

    /// How many of the pages under `buffer`'s storage are resident (mincore).
    func residentPages(_ buffer: ByteBuffer) -> Int {
        buffer.withUnsafeReadableBytes { bytes in
            let page = Int(sysconf(Int32(_SC_PAGESIZE)))
            let start = UnsafeMutableRawPointer(mutating: bytes.baseAddress! - 16)  // the mapping's first byte
            #expect(Int(bitPattern: start) % page == 0, "a large buffer is a mapping of its own")
            let pages = (buffer.capacity + 16 + page - 1) / page
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
}
