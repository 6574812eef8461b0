import Hummingbird
import NIOCore

/// A request's context with the address of the peer that sent it (an HTTP/2 stream's is its
/// connection's): what the gateway charges a forged provider token to.
struct PeerRequestContext: RequestContext {
    var coreContext: CoreRequestContextStorage
    /// The peer's IP address; "" where the channel has none (a Unix socket).
    let peer: String

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        peer = source.channel.remoteAddress?.ipAddress ?? ""
    }
}
