import Foundation

/// One line of the uplink: the long-lived connection a bgd keeps open to a push relay,
/// newline-delimited JSON both ways — straight on TLS (ALPN `bgrelay-uplink/1`, the device's
/// first line its credential, `Bearer <device>.<secret>`), or as an HTTP/2 stream (`POST
/// /v1/uplink`, the credential in Authorization). bgd sends its apps' device tokens and
/// acknowledges each push once it is committed to its own queue; the relay sends the pushes
/// providers gave it for this device, oldest first, until each is acknowledged.
public enum UplinkFrame: Codable, Sendable, Equatable {
    /// The ALPN name of the uplink as lines straight on TLS.
    public static let alpn = "bgrelay-uplink/1"

    // bgd → relay
    /// An app's device token, to be bound to this device (the first device to name it owns it).
    case register(token: String, topic: String)
    /// A token the app gave up: pushes to it answer 410 Unregistered with this time.
    case revoke(token: String, atMilliseconds: Int64)
    /// The push with this sequence number is committed on the device.
    case ack(seq: Int64)
    // relay → bgd
    /// The relay knows the device; pushes follow.
    case ready(device: String)
    case push(RelayedPush)
    /// A frame the relay refused, and why; nothing changed.
    case refused(code: String, reason: String)
    /// The relay ends this uplink (`superseded`: the device connected again; `stopping`: the
    /// node is going away): the device closes its side, and connects again unless superseded.
    /// The relay ends its side once the device has (HTTP/2 clients must not see the response end
    /// while they still send).
    case closing(code: String, reason: String)

    private enum Key: String, CodingKey { case type, token, topic, at, seq, device, push, code, reason }

    /// `{"type": "...", ...}`: one flat object per line, easy to write by hand with curl.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: Key.self)
        switch try c.decode(String.self, forKey: .type) {
        case "register": self = .register(token: try c.decode(String.self, forKey: .token), topic: try c.decode(String.self, forKey: .topic))
        case "revoke": self = .revoke(token: try c.decode(String.self, forKey: .token), atMilliseconds: try c.decode(Int64.self, forKey: .at))
        case "ack": self = .ack(seq: try c.decode(Int64.self, forKey: .seq))
        case "ready": self = .ready(device: try c.decode(String.self, forKey: .device))
        case "push": self = .push(try c.decode(RelayedPush.self, forKey: .push))
        case "refused": self = .refused(code: try c.decode(String.self, forKey: .code), reason: try c.decode(String.self, forKey: .reason))
        case "closing": self = .closing(code: try c.decode(String.self, forKey: .code), reason: try c.decode(String.self, forKey: .reason))
        case let type:
            throw DecodingError.dataCorruptedError(forKey: .type, in: c, debugDescription: "unknown frame type \(type)")
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: Key.self)
        switch self {
        case .register(let token, let topic):
            try c.encode("register", forKey: .type)
            try c.encode(token, forKey: .token)
            try c.encode(topic, forKey: .topic)
        case .revoke(let token, let at):
            try c.encode("revoke", forKey: .type)
            try c.encode(token, forKey: .token)
            try c.encode(at, forKey: .at)
        case .ack(let seq):
            try c.encode("ack", forKey: .type)
            try c.encode(seq, forKey: .seq)
        case .ready(let device):
            try c.encode("ready", forKey: .type)
            try c.encode(device, forKey: .device)
        case .push(let push):
            try c.encode("push", forKey: .type)
            try c.encode(push, forKey: .push)
        case .refused(let code, let reason):
            try c.encode("refused", forKey: .type)
            try c.encode(code, forKey: .code)
            try c.encode(reason, forKey: .reason)
        case .closing(let code, let reason):
            try c.encode("closing", forKey: .type)
            try c.encode(code, forKey: .code)
            try c.encode(reason, forKey: .reason)
        }
    }

    /// The frame as one line (without the newline).
    public func encoded() -> Data {
        (try? UplinkFrame.encoder.encode(self)) ?? Data()
    }

    /// A line read from the uplink; nil for one that is not a frame.
    public static func decode(_ line: some DataProtocol) -> UplinkFrame? {
        try? decoder.decode(UplinkFrame.self, from: Data(line))
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()
    private static let decoder = JSONDecoder()

    /// The longest line either side reads; a longer one ends the uplink (a push's payload is at
    /// most 5 KB, a VoIP push's; base64 under 7 KB).
    public static let maximumLine = 16 * 1024
}

/// The uplink's bytes as lines (each side reads the other's this way), refusing a line longer
/// than `limit` (`UplinkFrame.maximumLine`): a peer that never sends a newline cannot make the
/// reader hold an unbounded buffer.
public struct UplinkLines: Sendable {
    public struct TooLong: Error {}
    public let limit: Int
    private var partial: [UInt8] = []

    public init(limit: Int = UplinkFrame.maximumLine) { self.limit = limit }

    /// The lines `bytes` completes, without their newlines (an empty one is a keep-alive).
    public mutating func append(_ bytes: some Sequence<UInt8>) throws(TooLong) -> [[UInt8]] {
        var lines: [[UInt8]] = []
        for byte in bytes {
            if byte == UInt8(ascii: "\n") {
                lines.append(partial)
                partial = []  // the line keeps its buffer; an idle reader holds none
            } else {
                partial.append(byte)
                if partial.count > limit { throw TooLong() }
            }
        }
        return lines
    }

    /// What came after the last newline (a closing answer that is no stream).
    public var remainder: [UInt8] { partial }
}

/// A push as the relay forwards it to the device that owns its token.
public struct RelayedPush: Codable, Sendable, Equatable {
    /// The relay's number for it, increasing per device: what the device acknowledges.
    public var seq: Int64
    public var token: String
    public var topic: String
    public var apnsID: String
    public var pushType: String
    public var priority: Int
    public var collapseID: String?
    /// `apns-expiration` in milliseconds since 1970; nil: none given; 0: now or never (bgd
    /// delivers it at once or drops it).
    public var expirationMilliseconds: Int64?
    public var payload: Data

    /// What the device is told of a stored push's expiration: a now-or-never push says 0, not
    /// the minute the relay itself gave the device to take it. Before, bgd got that minute and
    /// held the push for the app's run to end, and let it replace a waiting push of its collapse
    /// id.
    public static func expirationMilliseconds(_ stored: Date?, nowOrNever: Bool) -> Int64? {
        nowOrNever ? 0 : stored.map { Int64($0.timeIntervalSince1970 * 1000) }
    }

    public init(
        seq: Int64, token: String, topic: String, apnsID: String, pushType: String, priority: Int,
        collapseID: String?, expirationMilliseconds: Int64?, payload: Data
    ) {
        self.seq = seq
        self.token = token
        self.topic = topic
        self.apnsID = apnsID
        self.pushType = pushType
        self.priority = priority
        self.collapseID = collapseID
        self.expirationMilliseconds = expirationMilliseconds
        self.payload = payload
    }
}

/// What a relay gives a device that enrolls (`POST /v1/devices`): its id and the secret it
/// authenticates the uplink with (`Authorization: Bearer <device>.<secret>`). bgd keeps it
/// 0600 in its state directory; the relay keeps only the secret's hash.
public struct RelayEnrollment: Codable, Sendable, Equatable {
    /// The relay's uplink (`https://host:2198`); the relay leaves it empty, bgd fills it in.
    public var url: String
    public var device: String
    public var secret: String
    /// A CA certificate (PEM file) bgd trusts for this relay, beside the system's.
    public var certificate: String?

    public init(url: String, device: String, secret: String, certificate: String? = nil) {
        self.url = url
        self.device = device
        self.secret = secret
        self.certificate = certificate
    }

    public var bearer: String { "Bearer \(device).\(secret)" }
}

/// Where bgd's uplink to a push relay stands (`bgctl push relay status`, `GET /v1/push/relay`).
public struct PushRelayStatus: Codable, Sendable, Equatable {
    public enum State: String, Codable, Sendable {
        /// No relay enrolled.
        case off
        case connecting
        case connected
        /// The last attempt failed; the next one is at `retryAt`.
        case waiting
    }

    public var state: State
    public var url: String?
    public var device: String?
    public var since: Date?
    public var lastError: String?
    public var retryAt: Date?
    /// Pushes taken from the relay since bgd started.
    public var received: Int
    /// How the uplink is carried while connected: `lines` (straight on TLS, ALPN
    /// `bgrelay-uplink/1`) or `http2` (a stream, with a relay that does not offer lines).
    public var transport: String?
    /// The last frame of bgd's the relay refused, as "code: reason" (`tokenTaken`: an app's
    /// token another device holds) — the uplink stays up, and this is where it shows.
    public var lastRefusal: String?

    public init(
        state: State, url: String? = nil, device: String? = nil, since: Date? = nil, lastError: String? = nil,
        retryAt: Date? = nil, received: Int = 0
    ) {
        self.state = state
        self.url = url
        self.device = device
        self.since = since
        self.lastError = lastError
        self.retryAt = retryAt
        self.received = received
    }
}

/// `POST /v1/push/relay`: enroll bgd with the relay whose uplink is at `url`.
public struct PushRelayEnrollRequest: Codable, Sendable, Equatable {
    public var url: String
    /// A CA certificate (PEM file) to trust for the relay, beside the system's.
    public var certificate: String?
    /// What the relay asks of a device to enroll, if it asks (bgrelay `--enrollment-token`).
    public var enrollmentToken: String?
    /// Enroll anew though bgd is enrolled already (a new device: the relay keeps the apps'
    /// device tokens for the old one). Absent: false.
    public var replace: Bool?

    public init(url: String, certificate: String? = nil, enrollmentToken: String? = nil, replace: Bool? = nil) {
        self.url = url
        self.certificate = certificate
        self.enrollmentToken = enrollmentToken
        self.replace = replace
    }
}
