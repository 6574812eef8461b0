import AsyncHTTPClient
import BackgroundModel
import Foundation
import NIOCore

/// The messages of an event stream, decoded line by line as the bytes arrive.
public struct StreamMessages: AsyncSequence, Sendable {
    public typealias Element = StreamMessage
    let body: HTTPClientResponse.Body

    public func makeAsyncIterator() -> Iterator { Iterator(chunks: body.makeAsyncIterator()) }

    public struct Iterator: AsyncIteratorProtocol {
        var chunks: HTTPClientResponse.Body.AsyncIterator
        var pending = Data()
        let decoder = WireCoding.makeDecoder()
        /// A line longer than this is not from bgd.
        static let maximumLine = 1024 * 1024

        public mutating func next() async throws -> StreamMessage? {
            while true {
                if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = pending[pending.startIndex..<newline]
                    pending = Data(pending[pending.index(after: newline)...])
                    if line.isEmpty { continue }
                    do {
                        return try decoder.decode(StreamMessage.self, from: line)
                    } catch {
                        throw BackgroundError.protocolViolation(String(decoding: line.prefix(200), as: UTF8.self))
                    }
                }
                guard pending.count <= Self.maximumLine else {
                    throw BackgroundError.protocolViolation("a line over 1 MiB")
                }
                guard let chunk = try await chunks.next() else { return nil }
                pending.append(contentsOf: chunk.readableBytesView)
            }
        }
    }
}
