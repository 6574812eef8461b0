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
            switch try await nextLine() {
            case .message(let message): return message
            case .unreadableEvent(_, let error): throw error
            case nil: return nil
            }
        }

        /// A line of the stream: a message, or an event this library cannot read — of a kind a
        /// newer bgd sends, or malformed — which still has a sequence number to acknowledge it by.
        enum Line {
            case message(StreamMessage)
            case unreadableEvent(EventSequence, BackgroundError)
        }

        /// The next line, with an event this library cannot read told apart from a broken
        /// stream: the stream goes on after it.
        mutating func nextLine() async throws -> Line? {
            while true {
                if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    let line = pending[pending.startIndex..<newline]
                    pending = Data(pending[pending.index(after: newline)...])
                    if line.isEmpty { continue }
                    do {
                        return .message(try decoder.decode(StreamMessage.self, from: line))
                    } catch {
                        let violation = BackgroundError.protocolViolation(
                            String(decoding: line.prefix(200), as: UTF8.self))
                        guard let numbered = try? decoder.decode(NumberedEvent.self, from: line) else {
                            throw violation
                        }
                        return .unreadableEvent(numbered.event.seq, violation)
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

    /// What every event line has, whatever its kind: `{"event": {"seq": N, …}}`.
    private struct NumberedEvent: Decodable {
        struct Event: Decodable { var seq: EventSequence }
        var event: Event
    }
}
