import Synchronization

/// A number that grows each time the rows it watches change, so an in-memory copy of them
/// elsewhere in bgd (the push gateway's view of device tokens and provider keys) knows to drop
/// what it holds, and a watcher (the relay uplink, which tells the relay of new tokens) is told.
/// Advanced after the transaction commits: a reader that sees the new number finds the new rows.
public final class Generation: Sendable {
    private let value = Atomic<Int>(0)
    private let observers = Mutex<[@Sendable () -> Void]>([])

    public init() {}

    public var current: Int { value.load(ordering: .acquiring) }

    /// Calls `body` after every advance (on the advancing thread: keep it short, e.g. a ring).
    public func observe(_ body: @escaping @Sendable () -> Void) { observers.withLock { $0.append(body) } }

    func advance() {
        value.add(1, ordering: .releasing)
        for observer in observers.withLock({ $0 }) { observer() }
    }
}
