import Synchronization

/// One callback that can be set, cleared and called from any thread.
///
/// Kept boxed in a class: a closure kept bare in a `Mutex` and read back with `withLock { $0 }`
/// came back inside one more reabstraction thunk on every read (Swift 6.3), so a callback called
/// on every wake grew a chain as the session went on (over 127 frames deep under perf) — a
/// quarter of a relay node's CPU in a burst of pushes, acknowledgements 170 ms to 1.5 s late,
/// and why sessions with no task of their own first cost three times the CPU per push. A
/// reference is read back as it was stored.
final class ListenerSlot: Sendable {
    private final class Listener: Sendable {
        let body: @Sendable () -> Void
        init(_ body: @escaping @Sendable () -> Void) { self.body = body }
    }
    private let slot = Mutex<Listener?>(nil)

    func set(_ body: @escaping @Sendable () -> Void) {
        let listener = Listener(body)
        slot.withLock { $0 = listener }
    }

    func clear() { slot.withLock { $0 = nil } }

    var isSet: Bool { slot.withLock { $0 != nil } }

    /// Calls the callback, if one is set, outside the lock.
    func call() { slot.withLock { $0 }?.body() }
}
