import BackgroundModel
import Foundation

/// What the APNs provider API asks of whoever keeps the pushes — bgd's store on one machine,
/// bgrelay's for devices it cannot reach — so both answer providers with the same code.
public protocol PushDestinations: Sendable {
    associatedtype Owner: PushTokenOwner

    /// Moves whenever a provider key or a device token changes: the intake's caches of both are
    /// dropped when it does, so a revocation answers 410 from the next request on.
    var credentialsGeneration: Int { get }
    func providerKey(_ keyID: String) async throws -> ProviderKeyRegistration?
    /// Who a device token belongs to; nil for a token never registered.
    func owner(ofDeviceToken token: String) async throws -> Owner?
    /// Commits accepted pushes durably, all or none: each provider's 200 waits for it.
    func commit(_ pushes: [AcceptedPush<Owner>], now: Date) async throws
}

/// The registration behind a device token: the topic (app) it is for, and whether it was revoked.
public protocol PushTokenOwner: Sendable {
    var topic: String { get }
    var revokedAt: Date? { get }
    /// What the flood limit counts pushes by when not the device token: at the relay, the device
    /// (one machine's apps share its allowance, so a provider cannot flood a device by spreading
    /// its pushes over the device's tokens).
    var floodScope: String? { get }
}

extension PushTokenOwner {
    public var floodScope: String? { nil }
}

/// A push that passed every check, for `owner`.
public struct AcceptedPush<Owner: PushTokenOwner>: Sendable {
    public var owner: Owner
    public var deviceToken: String
    public var apnsID: String
    public var pushType: String
    public var priority: Int
    public var collapseID: String?
    public var expiration: Date?
    public var payload: Data

    public init(
        owner: Owner, deviceToken: String, apnsID: String, pushType: String, priority: Int, collapseID: String?,
        expiration: Date?, payload: Data
    ) {
        self.owner = owner
        self.deviceToken = deviceToken
        self.apnsID = apnsID
        self.pushType = pushType
        self.priority = priority
        self.collapseID = collapseID
        self.expiration = expiration
        self.payload = payload
    }
}
