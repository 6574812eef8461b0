import Foundation
import Synchronization

/// One encoded app listing and the versions of what it was made from. Requests that find it
/// being made for their key wait for that one instead of making their own (a hundred clients
/// arriving together after a change cost one encoding, not a hundred).
final class ListingCache: Sendable {
    struct Key: Equatable {
        var commits: Int
        var connections: Int
        var lifecycles: Int
    }
    private struct State {
        var kept: (key: Key, data: Data)?
        var making: (key: Key, task: Task<Data, any Error>)?
    }
    private let state = Mutex(State())

    func data(for key: Key, make: @escaping @Sendable () async throws -> Data) async throws -> Data {
        enum Found {
            case kept(Data)
            case making(Task<Data, any Error>)
        }
        let found = state.withLock { state -> Found in
            if let kept = state.kept, kept.key == key { return .kept(kept.data) }
            if let making = state.making, making.key == key { return .making(making.task) }
            let task = Task { try await make() }
            state.making = (key, task)
            return .making(task)
        }
        switch found {
        case .kept(let data): return data
        case .making(let task):
            do {
                let data = try await task.value
                state.withLock { state in
                    if state.making?.key == key {
                        state.kept = (key, data)
                        state.making = nil
                    }
                }
                return data
            } catch {
                // The next request tries again.
                state.withLock { state in if state.making?.key == key { state.making = nil } }
                throw error
            }
        }
    }
}
