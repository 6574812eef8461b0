import BackgroundModel

/// One short hint after the status and reason `bgctl push send` was refused with, for the
/// reasons a provider under test meets most; what bgd's gateway checks to give each
/// (BackgroundGateway's PushIntake) is what the hint points at.
enum PushRefusalHint {
    static func hint(for reason: String?) -> String? {
        guard let reason = reason.flatMap(APNsReason.init(rawValue:)) else { return nil }
        switch reason {
        case .invalidProviderToken:
            return "the key id, team id and key do not match a provider key bgd knows (bgctl push keys lists them), or the clock is ahead"
        case .expiredProviderToken:
            return "the provider token is over an hour old (bgctl reuses one for 40 minutes: is the clock right?)"
        case .topicDisallowed:
            return "the key's topics do not include this app (bgctl push keys; add it with bgctl push keys add --topics)"
        case .badDeviceToken:
            return "no app has this device token (bgctl push token APP prints the app's)"
        case .deviceTokenNotForTopic:
            return "the device token is another app's (bgctl push token APP prints this app's)"
        case .unregistered:
            return "the device token was revoked; the app must register for a new one"
        case .tooManyProviderTokenUpdates:
            return "bgd accepted another token for this key less than 20 minutes ago (one made elsewhere, or bgctl's cache in ~/.cache/bgctl was cleared); send again once 20 minutes have passed"
        case .invalidPushType:
            return "a background push (--push-type background) carries only {\"aps\":{\"content-available\":1}} in aps — no alert, sound or badge"
        case .invalidPayload:
            return "the payload must be a JSON object, e.g. {\"aps\":{\"content-available\":1}}"
        case .badPriority:
            return "a background push goes at priority 5 (bgctl's default for it); 10 is for alerts"
        case .payloadTooLarge:
            return "a payload is at most 4096 bytes (5120 for a voip push)"
        default:
            return nil
        }
    }
}
