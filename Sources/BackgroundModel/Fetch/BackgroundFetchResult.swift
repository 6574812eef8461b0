/// What an app's fetch handler found: the values of iOS's `UIBackgroundFetchResult`.
///
/// The result feeds the scheduler: `.failed` makes the next wake come later (backoff).
public enum BackgroundFetchResult: String, Codable, Sendable, CaseIterable {
    case newData
    case noData
    case failed
}
