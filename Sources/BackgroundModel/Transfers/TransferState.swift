/// Where a transfer stands. `completed`, `failed` and `cancelled` are final.
public enum TransferState: String, Codable, Sendable, CaseIterable {
    /// Waiting for its turn, its begin date, a retry time or good conditions (`waitingReason` says which).
    case waiting
    /// Bytes are moving.
    case running
    /// Cancelled with resume data: kept, with its partial file, until the app resumes it.
    case paused
    case completed
    case failed
    case cancelled

    public var isFinal: Bool { self == .completed || self == .failed || self == .cancelled }
}

public enum TransferKind: String, Codable, Sendable, CaseIterable {
    case download
    case upload
}

/// Why a transfer ended without success: a stable code and a sentence.
public struct TransferError: Hashable, Codable, Sendable, Error, CustomStringConvertible {
    public enum Code: String, Codable, Sendable, CaseIterable {
        /// The app (or the operator) cancelled it.
        case cancelled
        /// No byte arrived for the no-progress timeout.
        case noProgress
        /// `timeoutIntervalForResource` passed before it finished.
        case timedOut
        /// More than 5 redirects.
        case tooManyRedirects
        /// The body's SHA-256 is not the one the app gave.
        case checksumMismatch
        /// The server answered with a status that retrying cannot fix (4xx other than 408/429).
        case httpError
        /// The TLS handshake failed (bad certificate): retrying cannot fix it.
        case tls
        /// The file could not be written or read.
        case fileError
        /// The URL cannot be fetched (bad scheme, no host).
        case badURL
        /// The host did not resolve, refused or could not be reached, and the transfer does not
        /// wait for connectivity (`waitsForConnectivity: false`, as `bgctl download` asks).
        case cannotConnect
    }

    public var code: Code
    public var message: String

    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// "code: message" — or the code alone when the message only repeats it (a cancelled
    /// transfer's is "cancelled"), so nothing reads "cancelled: cancelled".
    public var description: String { message == code.rawValue ? message : "\(code.rawValue): \(message)" }
}
