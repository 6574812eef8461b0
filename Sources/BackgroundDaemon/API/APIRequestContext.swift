import Hummingbird

/// The request context of the `/v1/` API: Hummingbird's core storage and a small body limit.
public struct APIRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    public init(source: Source) { coreContext = .init(source: source) }
    /// No request of this API needs more than a few kilobytes; 64 KiB is generous.
    public var maxUploadSize: Int { APIRequestContext.bodyLimit }
    public static let bodyLimit = 64 * 1024
}
