/// The stable codes of the API's errors (`{"error": code, "reason": …}`), shared by bgd and the
/// library: an app compares `BackgroundError.apiErrorCode` with these, never strings. New codes
/// are added, never renamed (a client may hold on to one).
public enum APIErrorCode: String, Codable, Sendable, CaseIterable {
    // Who may ask
    case unauthorized
    case operatorCredentialRequired
    case operatorOnly
    case notYourProcess
    // What was asked for is malformed
    case malformedRequest
    case bodyTooLarge
    case invalidQuery
    case invalidAppID
    case invalidState
    case invalidSequence
    case invalidRunID
    case invalidTaskID
    case invalidTaskIdentifier
    /// A background task's name with a control character in it.
    case invalidTaskName
    case invalidTransfer
    case invalidTransferID
    case invalidConditions
    case invalidProviderKey
    case launchCommandNotFound
    case destinationRequired
    case destinationNotAllowed
    case invalidRelayURL
    // What it names does not exist
    case notFound
    case methodNotAllowed
    case unknownApp
    case unknownRun
    case unknownBackgroundTask
    case unknownTaskRequest
    case unknownTransfer
    case unknownProviderKey
    case noDeviceToken
    case tokenUnavailable
    case dashboardOff
    // It cannot be done now, or at all
    case appAlreadyRegistered
    /// Enrolling with a push relay while enrolled already, without `replace`.
    case relayAlreadyEnrolled
    case runInFlight
    case runAlreadyEnded
    case taskNotRunning
    case transferNotActive
    case transferNotPaused
    case transferNotRetryable
    /// `beginBackgroundTask` once the app's background time is over.
    case backgroundTimeExpired
    // BGTaskScheduler's own errors (`BGTaskScheduler.Error.Code`)
    case unavailable
    case tooManyPendingTaskRequests
    case notPermitted
    // An app's share of bgd, all taken (what it holds open must end first)
    case tooManyStreams
    case tooManyTransfers
    case tooManyBackgroundTasks
    case tooManyUnacknowledgedEvents
    case tooManyUploadBytes
    // An upload larger than an app's whole upload quota
    case uploadTooLarge
    // Files: a transfer's destination or upload refused
    case destinationExists
    case destinationProtected
    case destinationInvalid
    case destinationDirectoryMissing
    case invalidPath
    case linkRefused
    case notRegularFile
    case outsideContainer
    case unreadable
    case uploadFileProtected
    case uploadFileUnreadable
    case fileError
    // A push relay refused or could not be reached
    case relayUnreachable
    // bgd's own trouble
    case storageFull
    case storageUnavailable
    case httpError
    case `internal`
}
