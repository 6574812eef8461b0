@_spi(CustomByteBufferAllocator) import NIOCore
import Synchronization

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A channel allocator whose large buffers take memory only where they are written: each buffer
/// of `threshold` bytes or more is its own anonymous mapping, so its untouched pages cost
/// nothing. For connections that sit idle by the thousand (the relay's device uplinks): NIOSSL
/// gives every connection a 32 KB read buffer and a 16 KB write buffer, sized for the largest
/// TLS record, and an idle uplink writes a few hundred bytes into either — from the heap they
/// cost all 48 KB (and more where HTTP/2 keeps a read's buffer and NIOSSL takes a fresh one).
/// Once such a buffer holds nothing anyone will read, `releasePages(of:)` gives back even the
/// pages that were written.
///
/// A mapping starts at a page, its length kept aside (`mappings`), so that no byte of it is
/// written but by the buffer's owner; a buffer from malloc carries a 16-byte header of 0 before
/// the bytes ByteBuffer sees (keeping malloc's alignment), and so never starts a page.
public enum PageBackedBuffers {
    public static let allocator = ByteBufferAllocator(
        allocate: pageBackedAllocate, reallocate: pageBackedReallocate, deallocate: pageBackedDeallocate,
        copy: pageBackedCopy)

    /// Buffers this large or larger are mapped (two pages: below it the heap wastes less).
    static let threshold = 8192
    static let header = 16
    static let pageSize = Int(sysconf(Int32(_SC_PAGESIZE)))
    /// The length of each live mapping, by its address.
    static let mappings = Mutex<[UInt: Int]>([:])

    static func mappedLength(_ pointer: UnsafeRawPointer) -> Int? {
        let address = UInt(bitPattern: pointer)
        guard address % UInt(pageSize) == 0 else { return nil }
        return mappings.withLock { $0[address] }
    }

    /// Gives back the pages of `buffer`'s storage when it is a mapping of ours: they read as
    /// zero from now on, and cost nothing until written again. Only for storage whose bytes no
    /// one will read again — past the readable bytes of every view of it, and its readable ones
    /// consumed — such as a read NIOSSL hands on (it empties its own view of its plaintext
    /// buffer first), or a TLS record the socket has written (`WrittenRecordPages`). Returns
    /// whether it did.
    @discardableResult
    public static func releasePages(of buffer: ByteBuffer) -> Bool {
        buffer.withVeryUnsafeBytes { storage in
            guard let base = storage.baseAddress, let length = mappedLength(base) else { return false }
            return madvise(UnsafeMutableRawPointer(mutating: base), length, MADV_DONTNEED) == 0
        }
    }
}

private func pageBackedAllocate(_ size: Int) -> UnsafeMutableRawPointer? {
    if size + PageBackedBuffers.header >= PageBackedBuffers.threshold {
        let page = PageBackedBuffers.pageSize
        let length = (max(size, 1) + page - 1) / page * page
        let mapped = mmap(nil, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
        guard let mapped, mapped != MAP_FAILED else { return nil }
        PageBackedBuffers.mappings.withLock { $0[UInt(bitPattern: mapped)] = length }
        return mapped
    }
    guard let base = malloc(size + PageBackedBuffers.header) else { return nil }
    base.storeBytes(of: 0, as: UInt64.self)
    return base + PageBackedBuffers.header
}

private func pageBackedDeallocate(_ pointer: UnsafeMutableRawPointer) {
    let address = UInt(bitPattern: pointer)
    if address % UInt(PageBackedBuffers.pageSize) == 0,
        let length = PageBackedBuffers.mappings.withLock({ $0.removeValue(forKey: address) })
    {
        munmap(pointer, length)
    } else {
        free(pointer - PageBackedBuffers.header)
    }
}

private func pageBackedReallocate(
    _ pointer: UnsafeMutableRawPointer?, _ oldSize: Int, _ newSize: Int
)
    -> UnsafeMutableRawPointer?
{
    guard let pointer else { return pageBackedAllocate(newSize) }
    if PageBackedBuffers.mappedLength(pointer) == nil, newSize + PageBackedBuffers.header < PageBackedBuffers.threshold
    {
        return realloc(pointer - PageBackedBuffers.header, newSize + PageBackedBuffers.header).map {
            $0 + PageBackedBuffers.header
        }
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
    guard count >= PageBackedBuffers.threshold, PageBackedBuffers.mappedLength(destination) != nil else {
        destination.copyMemory(from: source, byteCount: count)
        return
    }
    // Page by page of the destination.
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
