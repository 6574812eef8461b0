#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
@_spi(CustomByteBufferAllocator) import NIOCore

/// A channel allocator whose large buffers take memory only where they are written: each buffer
/// of `threshold` bytes or more is its own anonymous mapping, so its untouched pages cost
/// nothing. For connections that sit idle by the thousand (the relay's device uplinks): NIOSSL
/// gives every connection a 32 KB read buffer and a 16 KB write buffer, sized for the largest
/// TLS record, and an idle uplink writes a few hundred bytes into either — from the heap they
/// cost all 48 KB (and more where HTTP/2 keeps a read's buffer and NIOSSL takes a fresh one).
///
/// Every allocation carries a 16-byte header before the bytes ByteBuffer sees (keeping malloc's
/// alignment): the mapping's length, or 0 for one from malloc.
public enum PageBackedBuffers {
    public static let allocator = ByteBufferAllocator(
        allocate: pageBackedAllocate, reallocate: pageBackedReallocate, deallocate: pageBackedDeallocate,
        copy: pageBackedCopy)

    /// Buffers this large or larger are mapped (two pages: below it the heap wastes less).
    static let threshold = 8192
    static let header = 16
    static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
}

private func pageBackedAllocate(_ size: Int) -> UnsafeMutableRawPointer? {
    let total = size + PageBackedBuffers.header
    if total >= PageBackedBuffers.threshold {
        let page = PageBackedBuffers.pageSize
        let length = (total + page - 1) / page * page
        let mapped = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let mapped, mapped != MAP_FAILED else { return nil }
        mapped.storeBytes(of: UInt64(length), as: UInt64.self)
        return mapped + PageBackedBuffers.header
    }
    guard let base = malloc(total) else { return nil }
    base.storeBytes(of: 0, as: UInt64.self)
    return base + PageBackedBuffers.header
}

private func pageBackedDeallocate(_ pointer: UnsafeMutableRawPointer) {
    let base = pointer - PageBackedBuffers.header
    let length = base.load(as: UInt64.self)
    if length > 0 { munmap(base, Int(length)) } else { free(base) }
}

private func pageBackedReallocate(_ pointer: UnsafeMutableRawPointer?, _ oldSize: Int, _ newSize: Int)
    -> UnsafeMutableRawPointer?
{
    guard let pointer else { return pageBackedAllocate(newSize) }
    let base = pointer - PageBackedBuffers.header
    if base.load(as: UInt64.self) == 0, newSize + PageBackedBuffers.header < PageBackedBuffers.threshold {
        return realloc(base, newSize + PageBackedBuffers.header).map { $0 + PageBackedBuffers.header }
    }
    guard let moved = pageBackedAllocate(newSize) else { return nil }
    moved.copyMemory(from: pointer, byteCount: min(oldSize, newSize))
    pageBackedDeallocate(pointer)
    return moved
}

/// ByteBuffer copies only into storage it has just allocated (copy on write copies the whole
/// slice, written or not). Into a fresh mapping, whose pages read as zero until written, a
/// source page of zeros need not be copied — nor made resident: a 32 KB read buffer with a few
/// hundred bytes in it stays one page.
private func pageBackedCopy(_ destination: UnsafeMutableRawPointer, _ source: UnsafeRawPointer, _ count: Int) {
    let isFreshMapping = (destination - PageBackedBuffers.header).load(as: UInt64.self) > 0
    guard isFreshMapping, count >= PageBackedBuffers.threshold else {
        destination.copyMemory(from: source, byteCount: count)
        return
    }
    // Page by page of the destination (it starts a header into its first page).
    let page = PageBackedBuffers.pageSize
    var offset = 0
    while offset < count {
        let length = min(page - Int(bitPattern: destination + offset) % page, count - offset)
        if !isZero(source + offset, length) {
            (destination + offset).copyMemory(from: source + offset, byteCount: length)
        }
        offset += length
    }
}

private func isZero(_ bytes: UnsafeRawPointer, _ count: Int) -> Bool {
    let words = count / 8
    for index in 0..<words where bytes.loadUnaligned(fromByteOffset: index * 8, as: UInt64.self) != 0 { return false }
    for index in (words * 8)..<count where bytes.load(fromByteOffset: index, as: UInt8.self) != 0 { return false }
    return true
}
