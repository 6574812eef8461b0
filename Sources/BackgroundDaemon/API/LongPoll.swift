import Hummingbird
import HummingbirdCore

/// A request that waits for something to end (`?wait=SECONDS`, up to 600), answered by
/// `answer`: cancelled when the client leaves, so a `bgctl … --wait` interrupted with ^C holds
/// no subscription to the daemon's activity for the rest of its wait. (bgd's stop ends the wait
/// itself: `ActivityWaiter`.)
///
/// Watching for the client's leaving reads the connection past this request, so the connection
/// serves no other: the answer says `Connection: close`, and a pooling client (AsyncHTTPClient)
/// does not send its next request on it.
enum LongPoll {
    static func answer(
        _ request: Request, waiting wait: Duration?, _ answer: () async throws -> Response
    ) async throws -> Response {
        guard let wait, wait > .zero else { return try await answer() }
        do {
            var response = try await request.body.consumeWithCancellationOnInboundClose { _ in try await answer() }
            response.headers[.connection] = "close"
            return response
        } catch is CancellationError {
            // The client left (or the server was cancelled): nobody reads this, and it is no
            // failure to log.
            return Response(status: .noContent, headers: [.connection: "close"])
        }
    }
}
