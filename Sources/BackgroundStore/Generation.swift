import Synchronization

/// A number that grows each time the rows it watches change, so an in-memory copy of them
/// elsewhere in bgd (the push gateway's view of device tokens and provider keys) knows to drop
/// what it holds. Advanced after the transaction commits: a reader that sees the new number
/// finds the new rows.
public final class Generation: Sendable {
    private let value = Atomic<Int>(0)

    public init() {}

    public var current: Int { value.load(ordering: .acquiring) }

    func advance() { value.add(1, ordering: .releasing) }
}
