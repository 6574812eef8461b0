import NIOCore
import Synchronization

/// The port a listener bound, once it has — or why it could not: the push gateway and the
/// dashboard take port 0 in tests and say here which one they got, and bgd says it is ready only
/// once every listener is up.
public final class BoundPort: Sendable {
    private struct State {
        var outcome: Result<Int, ListenerFailed>?
        var waiters: [CheckedContinuation<Result<Int, ListenerFailed>, Never>] = []
    }
    private let state = Mutex(State())
    public var port: Int? { state.withLock { try? $0.outcome?.get() } }

    /// The port, once the listener is up (0 if it failed to start).
    public func wait() async -> Int { (try? await listening()) ?? 0 }

    /// The port once the listener is up; throws what stopped it from listening.
    public func listening() async throws(ListenerFailed) -> Int {
        let outcome = await withCheckedContinuation { continuation in
            let known = state.withLock { state -> Result<Int, ListenerFailed>? in
                if let outcome = state.outcome { return outcome }
                state.waiters.append(continuation)
                return nil
            }
            if let known { continuation.resume(returning: known) }
        }
        return try outcome.get()
    }

    public init() {}

    package func set(_ port: Int) { settle(.success(port)) }

    package func fail(_ failure: ListenerFailed) { settle(.failure(failure)) }

    /// Runs a listener; an error before it bound is why it could not listen, said with `flag`
    /// (and told to whoever waits for the port).
    package func serve(flag: String, address: String, _ listener: () async throws -> Void) async throws {
        do {
            try await listener()
        } catch where port == nil {
            let failure = ListenerFailed(flag: flag, address: address, error: error)
            fail(failure)
            throw failure
        }
    }

    /// What a listener makes before it listens — its TLS context, from files that may be bad
    /// or lack a name — failed: told to whoever waits for the port as well, or bgd would wait
    /// for ever to say it is ready (and never stop).
    package func failedToPrepare(_ error: any Error) { fail(ListenerFailed(notPrepared: error)) }

    private func settle(_ outcome: Result<Int, ListenerFailed>) {
        let waiters = state.withLock { state in
            state.outcome = state.outcome ?? outcome
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }
}

/// A listener that could not start, said with the flag that sets it.
public struct ListenerFailed: Error, CustomStringConvertible {
    public var description: String

    /// `flag` and `address` as the user gave them; `error` as the system said it.
    init(flag: String, address: String, error: any Error) {
        let said = "\(error)"
        if said.contains("Address already in use") || said.contains("EADDRINUSE") {
            description = "cannot listen on \(address) (\(flag)): the address is already in use; choose another with \(flag)"
        } else if error is SocketAddressError || error is SocketAddressError.UnknownHost
            || said.contains("Cannot assign requested address")
        {
            // The host, not the port: a name that does not resolve, or an address this machine
            // does not have. (`--push-port` goes with `--push-host`, `--port` with `--host`.)
            let hostFlag = flag.replacingOccurrences(of: "port", with: "host")
            description =
                "cannot listen on \(address) (\(hostFlag)): the host is neither an address of this machine nor a name that resolves to one (\(said)); give another with \(hostFlag)"
        } else {
            description = "cannot listen on \(address) (\(flag)): \(said); choose another with \(flag)"
        }
    }

    /// A listener that failed before it tried to listen, for the reason it gives.
    init(notPrepared error: any Error) { description = "\(error)" }
}

/// Addresses only this machine can reach: where plaintext push and the dashboard may listen
/// without being asked to listen wider.
public enum Loopback {
    public static func contains(_ host: String) -> Bool { host == "127.0.0.1" || host == "::1" || host == "localhost" }
}
