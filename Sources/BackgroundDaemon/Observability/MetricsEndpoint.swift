import BackgroundStore
import HTTPTypes
import Hummingbird
import NIOCore

extension DaemonMetrics {
    /// `GET /metrics` in Prometheus's text format, on the socket and on the dashboard alike.
    func response(store: BackgroundStore) async -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        return Response(
            status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: await exposition(store: store))))
    }
}
