import BackgroundModel
import Foundation

/// What the dashboard's `/events` (server-sent events) writes: an opening comment (the page's
/// EventSource opens at once), a `data:` line per activity worth a re-render, and a comment
/// every `keepAlive` whatever happens.
///
/// The comment keeps a quiet bgd's open tab connected: a proxy in front of the dashboard closes
/// a response silent for a minute (nginx's `proxy_read_timeout`). And a tab whose machine went
/// away without a FIN held its subscription until bgd next had something to say: only writes
/// let TCP find the peer gone (once its retransmissions give up, about 15 minutes on Linux).
/// It costs a wakeup every `keepAlive` (8 context switches a minute, BM11), and only while a
/// tab is open. The lines end when the feed does (bgd stopping).
enum DashboardEventLines {
    static let opening = ": bgd\n\n"
    static let keepAliveLine = ": keep-alive\n\n"

    static func make(
        feed: AsyncStream<Activity>, clock: any WallClock, keepAlive: Duration = .seconds(30)
    ) -> AsyncStream<String> {
        // Bounded like the feed itself: a tab that reads nothing holds at most this many.
        let (lines, sink) = AsyncStream<String>.makeStream(bufferingPolicy: .bufferingNewest(10_000))
        // The first keep-alive is due `keepAlive` after the opening, whenever the timer's task
        // gets to sleep (what a test that moves the clock once it read the opening relies on).
        // On the time that really passes (`elapsed`): a wall clock set back an hour must not
        // silence the tab for an hour.
        let firstDue = clock.elapsed + keepAlive
        sink.yield(opening)
        let forward = Task {
            for await activity in feed {
                // Progress alone does not warrant a re-render.
                if case .transferCheckpointed = activity { continue }
                sink.yield("data: \(kind(of: activity))\n\n")
            }
            sink.finish()
        }
        let tick = Task {
            var due = firstDue
            while (try? await clock.sleep(for: max(.zero, due - clock.elapsed))) != nil {
                due = clock.elapsed + keepAlive
                // Ended before the cancellation below was in place (the feed ended at once).
                if case .terminated = sink.yield(keepAliveLine) { return }
            }
        }
        sink.onTermination = { _ in
            forward.cancel()
            tick.cancel()
        }
        return lines
    }

    static func kind(of activity: Activity) -> String {
        let text = "\(activity)"
        return String(text.prefix { $0 != "(" })
    }
}
