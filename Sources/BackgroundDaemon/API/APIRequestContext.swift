import Hummingbird
import NIOCore

/// The request context of the `/v1/` API: Hummingbird's core storage, the connection (whose
/// peer the kernel names) and a small body limit.
public struct APIRequestContext: RequestContext {
    public var coreContext: CoreRequestContextStorage
    /// The connection the request came on.
    public let channel: any Channel
    /// The app calling, for a request under `/v1/app` (`AppAuthentication` sets it).
    public var caller: TokenIssuer.Bearer?
    public init(source: Source) {
        coreContext = .init(source: source)
        channel = source.channel
    }
    /// No request of this API needs more than a few kilobytes; 64 KiB is generous.
    public var maxUploadSize: Int { APIRequestContext.bodyLimit }
    public static let bodyLimit = 64 * 1024

    /// The app calling; only `/v1/app` routes have one (401 elsewhere, which would be a bug).
    func appCaller() throws -> TokenIssuer.Bearer {
        guard let caller else { throw APIError.unauthorized }
        return caller
    }
}
