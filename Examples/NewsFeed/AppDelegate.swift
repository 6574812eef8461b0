import Background
import Foundation
import Synchronization

/// Seed 000's AppDelegate, ported line by line: `allNewsItems`, `fetchNewsItems`, and
/// `application(_:performFetchWithCompletionHandler:)` answering NewData or NoData.
final class AppDelegate: BackgroundApplicationDelegate {
    let store: NewsStore
    /// The seed adds an item when `arc4random_uniform(2) == 1`; tests may pin the odds.
    let newDataProbability: Double
    /// Called after the list changed (the seed's KVO `didChangeValueForKey:@"allNewsItems"`).
    let onChange: @Sendable ([NewsItem]) -> Void
    private let items: Mutex<[NewsItem]>

    init(store: NewsStore, newDataProbability: Double, onChange: @escaping @Sendable ([NewsItem]) -> Void = { _ in }) {
        self.store = store
        self.newDataProbability = newDataProbability
        self.onChange = onChange
        self.items = Mutex(store.load())
    }

    var allNewsItems: [NewsItem] { items.withLock { $0 } }

    func application(
        _ application: BackgroundApplication,
        performFetchWithCompletionHandler completionHandler: @escaping @Sendable (BackgroundFetchResult) -> Void
    ) {
        do {
            let haveNewContent = try fetchNewsItems()
            completionHandler(haveNewContent ? .newData : .noData)
        } catch {
            completionHandler(.failed)
        }
    }

    /// Simulates fetching from a server: about half the time there is one new item.
    func fetchNewsItems() throws -> Bool {
        guard Double.random(in: 0..<1) < newDataProbability else { return false }
        let updated = try items.withLock { items in
            items = store.load()  // another process (the foreground app) may have written meanwhile
            items.append(NewsItem(date: .now, text: "News text \(items.count + 1)"))
            try store.save(items)
            return items
        }
        onChange(updated)
        return true
    }
}
