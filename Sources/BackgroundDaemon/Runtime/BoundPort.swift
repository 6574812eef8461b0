import Synchronization

/// The port a listener bound, once it has: the push gateway and the dashboard take port 0 in
/// tests and say here which one they got.
public final class BoundPort: Sendable {
    private let state = Mutex<(port: Int?, waiters: [CheckedContinuation<Int, Never>])>((nil, []))
    public var port: Int? { state.withLock { $0.port } }

    /// The port, once the listener is up.
    public func wait() async -> Int {
        await withCheckedContinuation { continuation in
            let known = state.withLock { state -> Int? in
                if let port = state.port { return port }
                state.waiters.append(continuation)
                return nil
            }
            if let known { continuation.resume(returning: known) }
        }
    }

    func set(_ port: Int) {
        let waiters = state.withLock { state in
            state.port = port
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: port) }
    }
}

/// Addresses only this machine can reach: where plaintext push and the dashboard may listen
/// without being asked to listen wider.
public enum Loopback {
    public static func contains(_ host: String) -> Bool { host == "127.0.0.1" || host == "::1" || host == "localhost" }
}
