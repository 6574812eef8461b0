import Hummingbird
import NIOCore

/// The request context of the `/v1/` API: Hummingbird's core storage, the connection (whose
/// peer the kernel names) and a small body limit.
public struct APIRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connection the request came on.
    public let channel: any Channel
    public init(source: Source) {
        coreContext = .init(source: source)
        channel = source.channel
    }
    /// No request of this API needs more than a few kilobytes; 64 KiB is generous.
    public var maxUploadSize: Int { APIRequestContext.bodyLimit }
    public static let bodyLimit = 64 * 1024
}
