import Foundation
import Synchronization
import Testing

@testable import BackgroundRelay

/// The inbox calls its listeners at the same cost however long the session has run.
///
/// A closure kept bare in a `Mutex` and read back with `withLock { $0 }` comes back inside one
/// more reabstraction thunk each time (Swift 6.3): called on every wake, the chain grows with
/// the session — a quarter of a relay node's CPU in a burst of pushes, acknowledgements up to
/// seconds late. The call stack under the listener shows it without timing anything: it must
/// be as deep at the thousandth wake as at the first.
struct SessionInboxTests {
    final class Depths: Sendable {
        private let depths = Mutex<[Int]>([])
        func record() { depths.withLock { $0.append(Thread.callStackReturnAddresses.count) } }
        var all: [Int] { depths.withLock { $0 } }
    }

    @Test func aListenerIsCalledAsDirectlyAtTheThousandthWakeAsAtTheFirst() {
        let inbox = SessionInbox()
        let depths = Depths()
        inbox.listen { depths.record() }  // told once now
        for _ in 0..<1_000 { inbox.ring() }
        let wakes = depths.all.dropFirst()  // the first call comes from `listen` itself
        #expect(wakes.count == 1_000)
        #expect(Set(wakes).count == 1, "call stack depths from \(wakes.first ?? 0) to \(wakes.max() ?? 0)")
    }

    @Test func theDrainedListenerToo() {
        let inbox = SessionInbox()
        let depths = Depths()
        inbox.onDrained { depths.record() }
        for _ in 0..<1_000 { inbox.drained() }
        #expect(depths.all.count == 1_000)
        #expect(Set(depths.all).count == 1, "call stack depths from \(depths.all.first ?? 0) to \(depths.all.max() ?? 0)")
    }
}
