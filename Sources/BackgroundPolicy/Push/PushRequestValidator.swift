import BackgroundModel
import Foundation

/// A push that passed every check that needs no state: what the gateway queues.
public struct ValidatedPush: Hashable, Sendable {
    /// The device token from the path, lowercase hex.
    public var deviceToken: String
    public var topic: String
    public var pushType: PushType
    public var priority: Int
    /// Nil: none given. `0`: deliver now or never.
    public var expiration: Date?
    public var collapseID: String?
    /// The provider's `apns-id`, or nil (the gateway makes one).
    public var apnsID: String?
    /// The JSON body, as sent.
    public var payload: Data
}

/// The provider API's request rules (reference/apns.md A4.1), in the order APNs applies them,
/// as one pure function: a request is accepted as a `ValidatedPush` or refused with APNs' reason.
/// Token, topic and provider-key checks need the store and happen in the gateway after this.
public enum PushRequestValidator {
    /// "Limited to a maximum size of 4 KB (4096 bytes)".
    public static let maximumPayload = 4096
    /// "For Voice over Internet Protocol (VoIP) notifications, the maximum payload size is 5 KB
    /// (5120 bytes)."
    public static let maximumVoIPPayload = 5120
    /// Nesting deeper than this is refused: no sane payload needs it, and parsers pay for it.
    public static let maximumDepth = 32

    /// Validates a request. `bodySize` is the number of bytes the gateway read, which it stops
    /// at `maximumVoIPPayload + 1`, so a larger body is refused without ever being buffered.
    public static func validate(
        method: String, path: String, headers: [(name: String, value: String)], body: Data, bodySize: Int
    ) -> Result<ValidatedPush, APNsReason> {
        guard method == "POST" else { return .failure(.methodNotAllowed) }
        guard path.hasPrefix("/3/device/") else { return .failure(.badPath) }
        let token = String(path.dropFirst("/3/device/".count))
        guard !token.isEmpty else { return .failure(.missingDeviceToken) }
        guard HexDigits.matches(token, length: 64...64) else { return .failure(.badDeviceToken) }

        var apns: [String: String] = [:]
        for (name, value) in headers {
            let key = name.lowercased()
            guard key.hasPrefix("apns-") else { continue }
            guard apns[key] == nil else { return .failure(.duplicateHeaders) }
            apns[key] = value
        }
        let isVoIP = apns["apns-push-type"] == PushType.voip.rawValue
        guard bodySize <= (isVoIP ? maximumVoIPPayload : maximumPayload) else { return .failure(.payloadTooLarge) }
        guard bodySize > 0, !body.isEmpty else { return .failure(.payloadEmpty) }

        if let id = apns["apns-id"], !isCanonicalUUID(id) { return .failure(.badMessageId) }
        guard let topic = apns["apns-topic"], !topic.isEmpty else { return .failure(.missingTopic) }
        // Printable ASCII, no space: a bundle id with a suffix. A control character is no topic.
        guard topic.utf8.count <= 255, topic.utf8.allSatisfy({ (0x21...0x7E).contains($0) }) else {
            return .failure(.badTopic)
        }
        if let collapse = apns["apns-collapse-id"],
            collapse.utf8.count > 64 || PrintableText.hasControlCharacters(collapse)
        {
            return .failure(.badCollapseId)
        }
        var expiration: Date?
        if let raw = apns["apns-expiration"] {
            guard let seconds = Int64(raw.trimmingCharacters(in: .whitespaces)), seconds >= 0,
                StorableDates.contains(Date(timeIntervalSince1970: TimeInterval(seconds)))
            else {
                return .failure(.badExpirationDate)  // past 9999 would not read back from the store
            }
            expiration = Date(timeIntervalSince1970: TimeInterval(seconds))
        }

        let aps: [String: Any]
        switch parse(body) {
        case .failure(let reason): return .failure(reason)
        case .success(let value): aps = value
        }
        // Exactly 1: `intValue` took 1.9 (and 1.1) as 1.
        let isSilent = (aps["content-available"] as? NSNumber)?.doubleValue == 1
        let hasUserVisible = aps["alert"] != nil || aps["sound"] != nil || aps["badge"] != nil
        let pushType: PushType
        if let raw = apns["apns-push-type"] {
            guard let type = PushType(rawValue: raw) else { return .failure(.invalidPushType) }
            pushType = type
        } else {
            pushType = isSilent && !hasUserVisible ? .background : .alert  // as APNs infers for iOS
        }
        // A background push wakes the app silently: content-available only, nothing to show.
        if pushType == .background && (!isSilent || hasUserVisible) { return .failure(.invalidPushType) }
        let priority: Int
        if let raw = apns["apns-priority"] {
            // The digits as APNs documents them: `Int` also reads "+5" and "05".
            guard ["10", "5", "1"].contains(raw), let value = Int(raw) else { return .failure(.badPriority) }
            priority = value
        } else {
            priority = pushType == .background ? 5 : 10
        }
        // "Always use priority 5. Using priority 10 is an error."
        if pushType == .background && priority == 10 { return .failure(.badPriority) }
        return .success(
            ValidatedPush(
                deviceToken: token.lowercased(), topic: topic, pushType: pushType, priority: priority,
                expiration: expiration,
                collapseID: apns["apns-collapse-id"], apnsID: apns["apns-id"], payload: body))
    }

    /// A push a relay sent on: the gateway's request rules again (a relay is a peer, and one
    /// with a bug, or another's, must not queue what bgd's own gateway refuses: a background
    /// push at priority 10, a payload that is no JSON, a collapse id of kilobytes). The
    /// expiration is not checked here: the uplink keeps it within what the store holds.
    public static func validateRelayed(
        token: String, topic: String, apnsID: String, pushType: String, priority: Int, collapseID: String?,
        payload: Data
    ) -> APNsReason? {
        var headers: [(name: String, value: String)] = [
            ("apns-topic", topic), ("apns-id", apnsID), ("apns-push-type", pushType), ("apns-priority", "\(priority)"),
        ]
        if let collapseID { headers.append(("apns-collapse-id", collapseID)) }
        let result = validate(
            method: "POST", path: "/3/device/\(token)", headers: headers, body: payload, bodySize: payload.count)
        guard case .failure(let reason) = result else { return nil }
        return reason
    }

    /// The `aps` dictionary of a JSON object body, or why not.
    static func parse(_ body: Data) -> Result<[String: Any], APNsReason> {
        guard String(data: body, encoding: .utf8) != nil, depth(of: body) <= maximumDepth,
            let object = try? JSONSerialization.jsonObject(with: body) as? [String: Any]
        else { return .failure(.invalidPayload) }
        guard let aps = object["aps"] else { return .success([:]) }
        guard let dictionary = aps as? [String: Any] else { return .failure(.invalidPayload) }
        return .success(dictionary)
    }

    /// How deeply brackets nest, counted outside strings, before any parser sees the bytes.
    static func depth(of body: Data) -> Int {
        var depth = 0, deepest = 0
        var inString = false, escaped = false
        for byte in body {
            if inString {
                if escaped {
                    escaped = false
                } else if byte == UInt8(ascii: "\\") {
                    escaped = true
                } else if byte == UInt8(ascii: "\"") {
                    inString = false
                }
                continue
            }
            switch byte {
            case UInt8(ascii: "\""): inString = true
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                depth += 1
                deepest = max(deepest, depth)
            case UInt8(ascii: "}"), UInt8(ascii: "]"): depth -= 1
            default: break
            }
        }
        return deepest
    }

    /// `apns-id`: a canonical lowercase UUID, 8-4-4-4-12.
    static func isCanonicalUUID(_ text: String) -> Bool {
        let groups = text.split(separator: "-", omittingEmptySubsequences: false)
        guard groups.map(\.count) == [8, 4, 4, 4, 12] else { return false }
        return groups.allSatisfy { $0.allSatisfy { ("0"..."9").contains($0) || ("a"..."f").contains($0) } }
    }
}
