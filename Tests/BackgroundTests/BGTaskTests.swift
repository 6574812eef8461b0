import BackgroundModel
import Synchronization
import Testing

@testable import Background

/// A `BGTask`'s expiration handler runs whenever bgd's word comes: before the launch handler
/// set it (the handler runs in a task of its own), or after.
struct BGTaskTests {
    @Test func aHandlerSetAfterTheExpirationRunsAtOnce() {
        let task = BGTask(identifier: "com.example.late", kind: .processing)
        task.expire()
        let ran = Atomic(0)
        task.expirationHandler = { ran.add(1, ordering: .relaxed) }
        #expect(ran.load(ordering: .relaxed) == 1, "set after bgd's word: runs at once")
    }

    @Test func aHandlerSetBeforeRunsAtTheExpirationOnly() {
        let task = BGTask(identifier: "com.example.early", kind: .processing)
        let ran = Atomic(0)
        task.expirationHandler = { ran.add(1, ordering: .relaxed) }
        #expect(ran.load(ordering: .relaxed) == 0)
        task.expire()
        #expect(ran.load(ordering: .relaxed) == 1)
    }
}
