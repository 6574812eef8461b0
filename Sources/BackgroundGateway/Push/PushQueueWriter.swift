import BackgroundModel
import Foundation

/// Group commit for accepted pushes: while one transaction is being written, the pushes that
/// arrive meanwhile gather, and the next transaction takes them all. Each provider still gets its
/// 200 only after its push is committed; under load one fsync serves many pushes, at rest each
/// push is written at once (no timer, no added latency).
actor PushQueueWriter<Destinations: PushDestinations> {
    private let destinations: Destinations
    private let clock: any WallClock
    private var pending: [(push: AcceptedPush<Destinations.Owner>, waiter: CheckedContinuation<Void, any Error>)] = []
    private var writing = false
    /// The most pushes one transaction takes.
    private let batchLimit = 512

    init(destinations: Destinations, clock: any WallClock) {
        self.destinations = destinations
        self.clock = clock
    }

    /// Returns once the push is committed.
    func enqueue(_ push: AcceptedPush<Destinations.Owner>) async throws {
        try await withCheckedThrowingContinuation { continuation in
            pending.append((push, continuation))
            if !writing {
                writing = true
                Task { await self.drain() }
            }
        }
    }

    private func drain() async {
        while !pending.isEmpty {
            let batch = Array(pending.prefix(batchLimit))
            pending.removeFirst(batch.count)
            do {
                try await destinations.commit(batch.map(\.push), now: clock.now)
                for item in batch { item.waiter.resume() }
            } catch {
                for item in batch { item.waiter.resume(throwing: error) }
            }
        }
        writing = false
    }
}
