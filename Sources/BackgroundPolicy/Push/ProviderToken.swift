import BackgroundModel
import Foundation

/// A provider's JWT as APNs reads it (reference/apns.md A4.1): header `{"alg":"ES256","kid"}`,
/// claims `{"iss","iat"}`. Parsing and the time rules are pure and live here; the ES256 signature
/// is checked by the gateway with the registered public key (`signingInput`, `signature`).
public struct ProviderToken: Hashable, Sendable {
    public var keyID: String
    public var teamID: String
    public var issuedAt: Date
    /// `base64url(header).base64url(claims)`: the bytes the signature covers.
    public var signingInput: String
    /// The raw 64-byte r‖s signature.
    public var signature: Data

    /// Parses `authorization: bearer <jwt>`; refuses anything but ES256 (algorithm confusion:
    /// `none`, `HS256`, `RS256` never reach a verifier).
    public static func parse(authorization: String?) -> Result<ProviderToken, APNsReason> {
        guard let authorization, !authorization.isEmpty else { return .failure(.missingProviderToken) }
        guard let token = BearerToken.of(authorization), token.utf8.count <= 1024 else {
            return .failure(.invalidProviderToken)
        }
        let segments = token.split(separator: ".", omittingEmptySubsequences: false)
        guard segments.count == 3, let headerData = base64URLDecode(segments[0]),
            let claimsData = base64URLDecode(segments[1]),
            let signature = base64URLDecode(segments[2]), signature.count == 64,
            let header = try? JSONSerialization.jsonObject(with: headerData) as? [String: Any],
            let claims = try? JSONSerialization.jsonObject(with: claimsData) as? [String: Any]
        else { return .failure(.invalidProviderToken) }
        guard header["alg"] as? String == "ES256", let keyID = header["kid"] as? String, !keyID.isEmpty,
            keyID.count <= 64
        else {
            return .failure(.invalidProviderToken)
        }
        guard let teamID = claims["iss"] as? String, !teamID.isEmpty,
            let iat = (claims["iat"] as? NSNumber)?.doubleValue,
            iat.isFinite, iat >= 0
        else { return .failure(.invalidProviderToken) }
        return .success(
            ProviderToken(
                keyID: keyID, teamID: teamID, issuedAt: Date(timeIntervalSince1970: iat.rounded(.down)),
                signingInput: "\(segments[0]).\(segments[1])", signature: signature))
    }

    static func base64URLDecode(_ text: Substring) -> Data? {
        guard !text.isEmpty, text.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "_" }) else {
            return nil
        }
        var base64 = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while base64.count % 4 != 0 { base64 += "=" }
        return Data(base64Encoded: base64)
    }
}

/// The time rules for provider tokens, per key: not older than an hour, not from the future
/// beyond a small skew, and a new token no sooner than 20 minutes after the last one accepted
/// (APNs answers 429 TooManyProviderTokenUpdates, which provider libraries must handle).
public struct ProviderTokenClock: Hashable, Sendable {
    public var maximumAge: Duration = .seconds(3600)
    public var allowedSkew: Duration = .seconds(60)
    public var minimumRefresh: Duration = .seconds(20 * 60)
    /// The newest `iat` accepted for each key.
    public private(set) var latest: [String: Date] = [:]

    public init() {}

    /// Checks a token whose signature is valid; records it when accepted.
    public mutating func admit(_ token: ProviderToken, now: Date) -> Result<Void, APNsReason> {
        if token.issuedAt > now.adding(allowedSkew) { return .failure(.invalidProviderToken) }
        if now.timeIntervalSince(token.issuedAt) > maximumAge.seconds { return .failure(.expiredProviderToken) }
        if let previous = latest[token.keyID] {
            if token.issuedAt == previous { return .success(()) }  // the same token again: the normal case
            if token.issuedAt > previous && token.issuedAt.timeIntervalSince(previous) < minimumRefresh.seconds {
                return .failure(.tooManyProviderTokenUpdates)
            }
            if token.issuedAt < previous { return .success(()) }  // an older, still valid token from another connection
        }
        latest[token.keyID] = token.issuedAt
        return .success(())
    }
}
