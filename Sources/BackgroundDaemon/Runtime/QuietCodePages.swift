import QuietThreads
import ServiceLifecycle

/// bgd's code pages go back to the kernel once its activity feed has been quiet for 30 s
/// (`IdleCodePages`): every event on the feed is activity, and starting counts.
struct QuietCodePages: Service {
    let pages: IdleCodePages
    let activity: ActivityFeed

    func run() async throws {
        let feed = activity.subscribe()
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    for await _ in feed { pages.noteActivity() }
                }
                group.addTask { await pages.run() }
                await group.next()
                group.cancelAll()
            }
        }
    }
}
