import BackgroundGateway
import BackgroundModel
import Foundation
import Synchronization

/// What a relay node keeps, and where: `SQLiteRelayStore` for a node on its own,
/// `PostgresRelayStore` for several nodes sharing one database. Every method is one transaction;
/// a push is committed before the provider's 200.
///
/// A device's uplink holds a *claim* on the device: a fencing token, one more than the last
/// claim's. Sending its pending pushes and marking them delivered both require the claim to be
/// the newest, so a node that was paused while the device reconnected elsewhere delivers nothing
/// when it wakes (`RelayRefusal.superseded`), and a push is never acknowledged twice.
public protocol RelayStore: Sendable {
    // Devices and their tokens
    func enroll(now: Date) async throws -> (device: String, secret: String)
    func authenticate(device: String, secret: String) async throws -> Bool
    /// Binds `token` to `device` for `topic`; registering it again is a no-op.
    func register(token: String, topic: String, device: String, now: Date) async throws
    /// Pushes to the token answer 410 with `at` from now; its pending pushes end as revoked.
    func revoke(token: String, device: String, at: Date) async throws
    func tokenOwner(_ token: String) async throws -> RelayTokenOwner?

    // Provider keys
    func addProviderKey(_ key: ProviderKeyRegistration, now: Date) async throws
    func removeProviderKey(_ keyID: String) async throws -> Bool
    func providerKey(_ keyID: String) async throws -> ProviderKeyRegistration?
    func providerKeys() async throws -> [ProviderKeyRegistration]
    /// Moves with every change of keys or tokens, by any node.
    func credentialsVersion() async throws -> Int
    /// That version as this process last knew it (what the provider side's caches check).
    var credentials: CredentialsVersion { get }

    // Pushes
    /// Commits accepted pushes; returns the devices that have new pending ones.
    func commit(
        _ pushes: [AcceptedPush<RelayTokenOwner>], now: Date, connected: @escaping @Sendable (String) -> Bool
    ) async throws -> Set<String>
    /// A new claim on `device` for `node`: its fencing token.
    func claim(device: String, node: String, now: Date) async throws -> Int64
    /// The session that made the claim `fencing` ended: no node holds the device now, unless a
    /// newer claim was made since. (A now-or-never push to it then ends at once.)
    func release(device: String, fencing: Int64) async throws
    /// The device's pending pushes but those in `sent` (what its session sent and awaits the
    /// acknowledgement of), oldest first, under the claim `fencing`. Not "after the last one
    /// sent": on PostgreSQL a push's id is taken when it is inserted and it is seen when its
    /// transaction commits, so one with a lower id can appear after a higher one was read.
    func pendingPushes(
        of device: String, excluding sent: Set<Int64>, fencing: Int64, now: Date
    ) async throws
        -> [RelayedPush]
    /// Pushes `seqs` are delivered (under the claim `fencing`), in one transaction; returns when
    /// each newly delivered one was accepted (one not pending, or not the device's, is skipped).
    func deliver(_ seqs: [Int64], device: String, fencing: Int64, now: Date) async throws -> [Date]
    /// Ends, as expired, pending pushes that can no longer be delivered — `apns-expiration` over
    /// a minute past (a push sent that moment may still be acknowledged), or held `holdFor`
    /// whatever its expiration —, ends as replaced a token's pending pushes beyond its newest
    /// `pendingPerToken`, and deletes pushes that ended before `now - keepEnded` (and a device's
    /// beyond its newest `endedPerDevice`), and
    /// tokens revoked before then; devices enrolled `holdFor` ago that never opened an uplink and
    /// hold no token and no push are forgotten. A pending push is never deleted: it waits for its
    /// device or its end — unless the device is gone: one not seen for `forgetAfter` (no uplink
    /// opened, none held by a node that said so with `markSeen`) is forgotten with its tokens
    /// and pushes.
    func prune(
        now: Date, holdFor: TimeInterval, keepEnded: TimeInterval, forgetAfter: TimeInterval
    ) async throws
        -> RelayPruneReport
    /// These devices hold an uplink to this node now (each node's pruner says so at every pass,
    /// so a device connected for months is not taken for gone).
    func markSeen(_ devices: [String], now: Date) async throws
    func pushCounts() async throws -> [RelayPushState: Int]
    func pushLog() async throws -> [(seq: Int64, device: String, apnsID: String, state: RelayPushState)]
}

/// What one pass of `RelayStore.prune` did.
public struct RelayPruneReport: Sendable, Equatable {
    /// Pending pushes it ended as expired.
    public var expired = 0
    /// Pending pushes it ended as replaced: a token's beyond its newest `pendingPerToken`.
    public var replaced = 0
    /// Ended pushes it deleted.
    public var deleted = 0
    /// Tokens revoked longer than `keepEnded` ago it forgot (a push to one then answers 400
    /// BadDeviceToken, as to a token never registered, not 410).
    public var tokensForgotten = 0
    /// Devices it forgot: enrolled longer than `holdFor` ago, never connected, holding nothing;
    /// or not seen for `forgetAfter`, with their tokens (counted in `tokensForgotten`).
    /// Enrollment is open unless the relay asks for a token, and every enrollment was a row for
    /// ever; bgd connects the moment it enrolls, so such a device's credential was never used
    /// (one used after this is refused, 401: enroll again).
    public var devicesForgotten = 0

    public init(
        expired: Int = 0, replaced: Int = 0, deleted: Int = 0, tokensForgotten: Int = 0, devicesForgotten: Int = 0
    ) {
        self.expired = expired
        self.replaced = replaced
        self.deleted = deleted
        self.tokensForgotten = tokensForgotten
        self.devicesForgotten = devicesForgotten
    }
}

/// The most device tokens one device may hold on a relay, active and revoked. A device is one
/// bgd, a token one of its apps, so this is far above any real device; without it an enrolled
/// device could register tokens without end (20,000 in 29 s). At the limit the device's oldest
/// revoked tokens make room; when all are active, `RelayRefusal.tooManyTokens`.
public let defaultTokensPerDevice = 10_000

/// The most pushes a token keeps pending: older ones end as replaced — as pushes arrive, every
/// `PendingTrim.every`th for a token, and at each pruner's pass. APNs keeps one per app while a
/// device is offline, and bgd coalesces what arrives to the newest of each collapse id; without
/// a bound, a provider sending to a device that never comes back (at the flood limit, 20 a
/// second) would fill the store for `--hold-pushes` (52M rows in 30 days), and with the
/// pruner's hourly pass alone a token held up to 72,000 pushes (of up to 4 KB) between passes.
let pendingPerToken = 1_000

/// Says, as a node commits pushes, when a token's pending ones are to be cut back to
/// `pendingPerToken`: after every `every` pushes this node committed for it. The cut walks the
/// token's newest thousand, so it costs a sixty-fourth of that a push, and a token holds at
/// most `pendingPerToken + every - 1` between cuts (plus what other nodes committed).
final class PendingTrim: Sendable {
    static let every = 64
    private let counts = Mutex<[String: Int]>([:])

    /// The tokens of `tokens` (one entry a push committed pending) whose cut is due now.
    func due(_ tokens: [String]) -> Set<String> {
        counts.withLock { counts in
            // Bounded: a node that saw this many tokens counts afresh (a cut then comes late by
            // at most `every` pushes, and the pruner's pass comes anyway).
            if counts.count > 100_000 { counts.removeAll() }
            var due: Set<String> = []
            for token in tokens {
                let count = counts[token, default: 0] + 1
                if count >= Self.every {
                    counts[token] = 0
                    due.insert(token)
                } else {
                    counts[token] = count
                }
            }
            return due
        }
    }
}

/// The most ended pushes kept per device, whatever their age (each with its payload, up to
/// 4 KB): `--keep-history` alone let a device a provider floods at the limit (20 a second) keep
/// 12 million of them for the week.
let endedPerDevice = 1_000

/// How long past its `apns-expiration` a pending push waits for the pruner: one sent to its
/// device just before may still be acknowledged (the session's own read expires them exactly).
let expirationGrace: TimeInterval = 60

/// Ended pushes one prune transaction deletes at most (the writer is never held long).
let pruneBatch = 1_000

/// How long a node waits for one store call before it answers as if the store had failed (503
/// to a provider, `unavailable` to a device): long past any healthy commit, short of a
/// provider's own timeout.
let storeCallLimit: Duration = .seconds(10)

/// The most pending pushes one read hands a session.
let pendingBatch = 256

/// The most pushes a session sends ahead of the device's acknowledgements: a device that reads
/// slowly (or never acknowledges) is not sent its whole backlog, and what the session excludes
/// from each read stays small.
let unacknowledgedLimit = 4 * pendingBatch

extension RelayStore {
    /// Push `seq` is delivered; when it was accepted, or nil if it was not pending or not the device's.
    public func deliver(_ seq: Int64, device: String, fencing: Int64, now: Date) async throws -> Date? {
        try await deliver([seq], device: device, fencing: fencing, now: now).first
    }
}
