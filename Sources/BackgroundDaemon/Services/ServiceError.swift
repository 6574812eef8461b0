import BackgroundModel

/// What a use-case service refuses, in its own words; `APIError.from` is the one place that turns
/// these (and the store's) into statuses and codes.
enum ServiceError: Error, Equatable {
    case launchCommandNotFound(String)
    case noDeviceToken(AppID)
    case tokenUnavailable(AppID)
    case unknownProviderKey(String)
    case unknownTransfer(TransferID)
    case transferNotActive(TransferID)
    case transferNotPaused(TransferID)
    case transferNotRetryable(TransferID, String)
    case taskNotRunning(AppID, identifier: String)
    case unknownBackgroundTask(Int)
    case backgroundTimeExpired(String)
    case dashboardOff
    /// The app holds the most event streams it may.
    case tooManyStreams(AppID)
    /// The app has the most transfers outstanding it may.
    case tooManyTransfers(AppID)
    /// The app holds the most background tasks it may.
    case tooManyBackgroundTasks(AppID)
    /// The app has left the most events unacknowledged it may.
    case tooManyUnacknowledgedEvents(AppID)
    /// The app's waiting uploads hold `held` bytes, and `size` more would pass its quota.
    case uploadQuotaExceeded(AppID, held: Int64, size: Int64, quota: Int64)
}
