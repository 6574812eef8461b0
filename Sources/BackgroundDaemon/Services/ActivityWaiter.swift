import BackgroundModel
import Foundation
import ServiceLifecycle

/// Waits for something to end by watching the activity feed, on the daemon's clock: a run, a
/// transfer. One way to wait, so that none of them can miss an end that lands between reading
/// the store and subscribing.
struct ActivityWaiter: Sendable {
    let activity: ActivityFeed
    let clock: any WallClock

    /// `read()` now; if that has not ended, the first activity `match` accepts within `timeout`,
    /// else `read()` again. Nil when `read()` finds nothing, even after the wait: a run that does
    /// not exist yet (the one bgd starts next, say, just after it restarted) is waited for like
    /// one in flight. bgd's graceful stop ends the wait at once (the answer is what `read()`
    /// finds then): before, a `?wait=600` held the stop for up to ten minutes.
    func awaitEnd<T: Sendable>(
        timeout: Duration, read: () async throws -> T?, hasEnded: (T) -> Bool,
        match: @escaping @Sendable (Activity) -> T?
    ) async throws -> T? {
        // Subscribed before reading the store, so the end cannot slip between.
        let (feed, endFeed) = activity.subscription()
        return try await withGracefulShutdownHandler {
            try await awaitEnd(in: feed, timeout: timeout, read: read, hasEnded: hasEnded, match: match)
        } onGracefulShutdown: {
            endFeed()
        }
    }

    private func awaitEnd<T: Sendable>(
        in feed: AsyncStream<Activity>, timeout: Duration, read: () async throws -> T?, hasEnded: (T) -> Bool,
        match: @escaping @Sendable (Activity) -> T?
    ) async throws -> T? {
        guard let current = try await read() else {
            guard timeout > .zero else { return nil }
            if let ended = try await first(in: feed, within: timeout, match) { return ended }
            return try await read()
        }
        if hasEnded(current) || timeout <= .zero { return current }
        if let ended = try await first(in: feed, within: timeout, match) { return ended }
        return try await read() ?? current
    }

    /// The first activity in `feed` that `match` accepts, or nil once `timeout` has passed on the
    /// daemon's clock or the feed has ended.
    func first<T: Sendable>(
        in feed: AsyncStream<Activity>, within timeout: Duration, _ match: @escaping @Sendable (Activity) -> T?
    ) async throws -> T? {
        let deadline = clock.now.adding(timeout)
        let clock = self.clock
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                for await activity in feed {
                    if let found = match(activity) { return found }
                }
                return nil
            }
            group.addTask {
                try await clock.sleep(until: deadline)
                return nil
            }
            defer { group.cancelAll() }
            return try await group.next() ?? nil
        }
    }
}
