import NIOCore

/// How a listener's connections take their buffers, when not as NIO would: set on each
/// connection before any handler is added (NIOSSL sizes its own buffers from the channel's
/// allocator when it is added).
package struct ConnectionBuffers: Sendable {
    package let allocator: ByteBufferAllocator
    /// Sizes each read from the socket. NIO keeps the last read's buffer for the next one, so
    /// this is also what a connection holds between reads.
    package let receive: AdaptiveRecvByteBufferAllocator

    /// For connections that sit idle by the thousand (bgrelay's device uplinks): large buffers
    /// cost only the pages written (`PageBackedBuffers`), and reads start at 512 bytes rather
    /// than NIO's 2 KB — an idle uplink reads a keep-alive record of a few dozen bytes, and the
    /// buffer grows (to 64 KB) only for a connection that reads more, such as a burst of
    /// acknowledgements. An idle device then holds a 1 KB read buffer (its TLS handshake grows
    /// it once), not 2 KB.
    package static let idle = ConnectionBuffers(
        allocator: PageBackedBuffers.allocator,
        receive: AdaptiveRecvByteBufferAllocator(minimum: 64, initial: 512, maximum: 65_536))
}
