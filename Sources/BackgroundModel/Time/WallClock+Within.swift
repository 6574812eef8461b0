import Synchronization

/// What `WallClock.within` throws when its limit passes before the work ends.
public struct DeadlineExceeded: Error, CustomStringConvertible {
    public let limit: Duration
    public var description: String { "no answer within \(limit.humanDescription)" }
}

extension WallClock {
    /// `body`'s result, or `DeadlineExceeded` once `limit` has passed first. `body` is then
    /// cancelled and left to end on its own: work that ignores cancellation (a database call
    /// stuck on a connection that will never answer) must not hold its caller, nor everyone
    /// queued behind the caller. A cancelled caller gets `CancellationError` at once, for the
    /// same reason. The limit is time that really passes (`sleep(for:)`): a clock set back while
    /// it runs does not lengthen it.
    public func within<T: Sendable>(
        _ limit: Duration, _ body: @escaping @Sendable () async throws -> T
    ) async throws -> T {
        let race = Race<T>()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                race.start(continuation)
                let timer = Task {
                    try? await self.sleep(for: limit)
                    if !Task.isCancelled { race.finish(.failure(DeadlineExceeded(limit: limit))) }
                }
                race.work = Task {
                    do {
                        race.finish(.success(try await body()))
                    } catch {
                        race.finish(.failure(error))
                    }
                    timer.cancel()
                }
            }
        } onCancel: {
            race.cancel()
        }
    }
}

/// The first of a piece of work and its timer to finish answers; the other is cancelled.
private final class Race<T: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<T, any Error>?
        var work: Task<Void, Never>?
        var cancelled = false
    }
    private let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<T, any Error>) {
        let cancelled = state.withLock { state in
            if !state.cancelled { state.continuation = continuation }
            return state.cancelled
        }
        if cancelled { continuation.resume(throwing: CancellationError()) }
    }

    var work: Task<Void, Never>? {
        get { state.withLock { $0.work } }
        set {
            let cancelNow = state.withLock { state in
                state.work = newValue
                return state.cancelled || state.continuation == nil
            }
            if cancelNow { newValue?.cancel() }
        }
    }

    func finish(_ result: Result<T, any Error>) {
        let (continuation, work) = state.withLock { state in
            defer { state.continuation = nil }
            return (state.continuation, state.work)
        }
        guard let continuation else { return }
        continuation.resume(with: result)
        if case .failure(let error) = result, error is DeadlineExceeded { work?.cancel() }
    }

    func cancel() {
        let (continuation, work) = state.withLock { state in
            state.cancelled = true
            defer { state.continuation = nil }
            return (state.continuation, state.work)
        }
        continuation?.resume(throwing: CancellationError())
        work?.cancel()
    }
}
