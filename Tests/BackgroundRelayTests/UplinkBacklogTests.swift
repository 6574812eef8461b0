import Foundation
import NIOCore
import Synchronization
import Testing

@testable import BackgroundRelay

/// An HTTP/2 uplink's reader stops reading the device's lines while `SessionInbox.backlogLimit`
/// wait for the session, as the line uplink's does: a device that sends and never reads the
/// answers is held back by flow control instead of growing the relay's memory.
struct UplinkBacklogTests {
    final class Seen: Sendable {
        let waiting = Mutex<[Int]>([])
    }

    /// The device's body: `buffers` of 100 keep-alive lines each, noting how much waited in the
    /// inbox each time the reader asked for more.
    struct Lines: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let inbox: SessionInbox
        let buffers: Int
        let seen: Seen

        struct AsyncIterator: AsyncIteratorProtocol {
            let lines: Lines
            var given = 0
            mutating func next() async throws -> ByteBuffer? {
                let waiting = lines.inbox.backlog
                lines.seen.waiting.withLock { $0.append(waiting) }
                guard given < lines.buffers else { return nil }
                given += 1
                return ByteBuffer(string: String(repeating: "\n", count: 100))
            }
        }

        func makeAsyncIterator() -> AsyncIterator { AsyncIterator(lines: self) }
    }

    @Test func theReaderWaitsWhileTheSessionHasABacklog() async throws {
        let inbox = SessionInbox()
        let lines = Lines(inbox: inbox, buffers: 60, seen: Seen())
        // A session that takes what waits only once the bound is passed (one stuck writing).
        let (arrivals, arrived) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        inbox.listen { arrived.yield() }
        let session = Task {
            var taken = 0
            for await _ in arrivals where inbox.backlog > SessionInbox.backlogLimit {
                taken += inbox.take().events.count
                inbox.drained()
            }
            return taken
        }
        await UplinkSession.read(lines, into: inbox)
        arrived.finish()
        let taken = await session.value
        let seen = lines.seen.waiting.withLock { $0 }
        #expect(seen.count == 61, "every buffer was read")
        #expect(seen.allSatisfy { $0 <= SessionInbox.backlogLimit }, "never asked for more past the bound: \(seen.max() ?? 0)")
        #expect(taken + inbox.take().events.count == 6_000 + 1, "every line, and the end")
    }
}
