import BackgroundModel
import Foundation

/// What bgd knows durably about a partial download: the only basis on which bytes may be appended.
public struct DownloadCheckpoint: Hashable, Codable, Sendable {
    /// Bytes of the body that are on disk and synced: the offset to resume from (never the file's
    /// size, which may hold unsynced bytes after a crash).
    public var offset: Int64
    /// The representation's total size, as the server gave it.
    public var total: Int64?
    /// The strong validator the bytes came with: an entity-tag, or a strong Last-Modified date.
    public var validator: Validator?

    public enum Validator: Hashable, Codable, Sendable {
        case entityTag(String)
        case lastModified(String)
    }

    public init(offset: Int64 = 0, total: Int64? = nil, validator: Validator? = nil) {
        self.offset = offset
        self.total = total
        self.validator = validator
    }

    public static let empty = DownloadCheckpoint()

    /// The request headers for the next attempt: `Range` and `If-Range` only when there is
    /// something to resume and a strong validator to guard it (RFC 9110 §13.1.5: never a weak
    /// tag); identity encoding always, so that the bytes stored are the bytes counted.
    public var requestHeaders: [(String, String)] {
        var headers = [("Accept-Encoding", "identity")]
        if offset > 0, let validator {
            headers.append(("Range", "bytes=\(offset)-"))
            switch validator {
            case .entityTag(let tag): headers.append(("If-Range", tag))
            case .lastModified(let date): headers.append(("If-Range", date))
            }
        }
        return headers
    }

    /// Whether the next request asks for a range.
    public var asksForRange: Bool { offset > 0 && validator != nil }
}

/// The response head, as far as resuming cares.
public struct ResponseHead: Hashable, Sendable {
    public var status: Int
    public var contentRange: String?
    public var contentLength: Int64?
    public var entityTag: String?
    public var lastModified: String?
    public var date: String?
    public var contentEncoding: String?
    public var retryAfter: String?

    public init(
        status: Int, contentRange: String? = nil, contentLength: Int64? = nil, entityTag: String? = nil,
        lastModified: String? = nil, date: String? = nil, contentEncoding: String? = nil, retryAfter: String? = nil
    ) {
        self.status = status
        self.contentRange = contentRange
        self.contentLength = contentLength
        self.entityTag = entityTag
        self.lastModified = lastModified
        self.date = date
        self.contentEncoding = contentEncoding
        self.retryAfter = retryAfter
    }

    /// The strong validator this response carries, if any: a strong entity-tag, else a
    /// Last-Modified at least a second before Date (RFC 9110 §8.8.2.2).
    public var strongValidator: DownloadCheckpoint.Validator? {
        if let entityTag {
            return entityTag.hasPrefix("W/") ? nil : .entityTag(entityTag)
        }
        guard let lastModified, let date, let modified = HTTPDate.parse(lastModified), let sent = HTTPDate.parse(date),
            sent.timeIntervalSince(modified) >= 1
        else { return nil }
        return .lastModified(lastModified)
    }

    var isIdentityEncoded: Bool {
        guard let contentEncoding else { return true }
        let value = contentEncoding.trimmingCharacters(in: .whitespaces).lowercased()
        return value.isEmpty || value == "identity"
    }
}

/// What to do with a response to a download attempt — the procedure of `resume.md`, pure, so
/// that every rule has a test: append only on a 206 whose range, total, validator and encoding all
/// match the checkpoint; a 200 starts over; a 416 completes only what is provably complete; no
/// non-2xx body is ever written.
public enum ResumeDecision: Hashable, Sendable {
    /// Write the body at `offset` (0 truncates: start over). The checkpoint to keep from now on.
    case write(from: Int64, checkpoint: DownloadCheckpoint, restarted: Bool)
    /// The file on disk is already the whole body (416 on a complete download): verify and finish.
    case alreadyComplete
    /// Do not write this body; throw the checkpoint away and start over on the next attempt.
    case discardAndRestart(reason: String)
    /// Try again later (5xx, 408, 429, a network error): keep the checkpoint.
    case retry(reason: String, retryAfter: String?)
    /// Retrying cannot help.
    case fail(TransferError)

    public static func decide(_ head: ResponseHead, checkpoint: DownloadCheckpoint) -> ResumeDecision {
        switch head.status {
        case 200, 203, 204:
            // The whole body: 203 is a 200 a proxy passed on, 204 an empty one (curl saves both;
            // before, they were retried as unexpected for a day, then failed for no progress).
            guard head.isIdentityEncoded else {
                return .discardAndRestart(
                    reason: "the server sent Content-Encoding \(head.contentEncoding ?? "") although identity was asked"
                )
            }
            let fresh = DownloadCheckpoint(offset: 0, total: head.contentLength, validator: head.strongValidator)
            return .write(from: 0, checkpoint: fresh, restarted: checkpoint.offset > 0)
        case 206:
            guard checkpoint.asksForRange else {
                return .discardAndRestart(reason: "206 to a request without Range")
            }
            guard let range = ContentRange(head.contentRange ?? "") else {
                return .discardAndRestart(reason: "206 without a usable Content-Range (\(head.contentRange ?? "none"))")
            }
            guard range.start == checkpoint.offset else {
                return .discardAndRestart(
                    reason: "206 for bytes from \(range.start), not from the checkpoint at \(checkpoint.offset)")
            }
            if let total = checkpoint.total, range.total != total {
                return .discardAndRestart(
                    reason: "206 with total \(range.total.map(String.init) ?? "*"), not the \(total) stored")
            }
            guard let validator = head.strongValidator, validator == checkpoint.validator else {
                return .discardAndRestart(reason: "206 whose validator is not the one the stored bytes came with")
            }
            guard head.isIdentityEncoded else {
                return .discardAndRestart(reason: "206 with Content-Encoding \(head.contentEncoding ?? "")")
            }
            var next = checkpoint
            next.total = range.total ?? checkpoint.total
            return .write(from: checkpoint.offset, checkpoint: next, restarted: false)
        case 416:
            // Complete only if the server's size is ours and nothing says the content changed.
            if let range = ContentRange(head.contentRange ?? ""), range.isUnsatisfied, let total = range.total,
                total == checkpoint.offset, checkpoint.total == total,
                head.strongValidator == nil || head.strongValidator == checkpoint.validator
            {
                return .alreadyComplete
            }
            return .discardAndRestart(reason: "416 that does not show the stored bytes are the whole body")
        case _ where Self.isRetryable(status: head.status):
            return .retry(reason: "HTTP \(head.status)", retryAfter: head.retryAfter)
        case 400...499:
            return .fail(TransferError(.httpError, "HTTP \(head.status)"))
        case 300...399:
            // What is left of 3xx once redirects are followed (300, 304, 305): asking again
            // gets the same answer.
            return .fail(TransferError(.httpError, "HTTP \(head.status), which is no redirect to follow"))
        default:
            return .retry(reason: "unexpected HTTP \(head.status)", retryAfter: nil)
        }
    }
}

extension ResumeDecision {
    /// The answers worth trying again later, for downloads and uploads alike: a timeout (408),
    /// too many requests (429), and every server error (5xx). Any other 4xx is final.
    public static func isRetryable(status: Int) -> Bool {
        status == 408 || status == 429 || (500...599).contains(status)
    }
}

/// `Content-Range: bytes 100-199/1000`, `bytes 100-199/*`, or `bytes */1000`.
struct ContentRange: Hashable {
    var start: Int64
    var end: Int64
    var total: Int64?
    var isUnsatisfied: Bool

    init?(_ text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("bytes ") else { return nil }
        let spec = trimmed.dropFirst("bytes ".count)
        let parts = spec.split(separator: "/", maxSplits: 1, omittingEmptySubsequences: false)
        guard parts.count == 2 else { return nil }
        let totalText = parts[1].trimmingCharacters(in: .whitespaces)
        if totalText == "*" {
            total = nil
        } else {
            guard let value = Int64(totalText), value >= 0 else { return nil }
            total = value
        }
        let rangeText = parts[0].trimmingCharacters(in: .whitespaces)
        if rangeText == "*" {
            guard total != nil else { return nil }
            start = 0
            end = -1
            isUnsatisfied = true
            return
        }
        let bounds = rangeText.split(separator: "-", maxSplits: 1, omittingEmptySubsequences: false)
        guard bounds.count == 2, let first = Int64(bounds[0]), let last = Int64(bounds[1]), first >= 0, last >= first
        else {
            return nil
        }
        if let total, last >= total { return nil }
        start = first
        end = last
        isUnsatisfied = false
    }
}

/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the only form servers must send.
public enum HTTPDate {
    public static func parse(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.date(from: text.trimmingCharacters(in: .whitespaces))
    }

    public static func format(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
