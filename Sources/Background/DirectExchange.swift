import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// One HTTP/1.1 request to bgd on a connection of its own, written and read on the calling
/// thread. A command-line tool asks one thing and exits: AsyncHTTPClient's event-loop threads,
/// connection pool and their first use of every generic type in them were about a third of
/// `bgctl apps --json`. Apps, which keep a connection and a stream open, use the event loop.
enum DirectExchange {
    struct Answer: Equatable {
        var status: Int
        var body: Data
    }

    struct Failure: Error, Equatable {
        var reason: String
        /// bgd took the request and its answer did not come in time.
        var timedOut = false
        /// The socket is not this user's to connect to.
        var permissionDenied = false
    }

    /// The largest answer read (bgd's largest listings are well under it).
    static let answerLimit = 16 << 20

    static func send(
        socketPath: String, method: String, path: String, headers: [(String, String)], body: Data?,
        timeout: Duration
    ) throws(Failure) -> Answer {
        guard path.hasPrefix("/"), path.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
            throw Failure(reason: "'\(path.prefix(80))' is not a request path (no spaces or control characters)")
        }
        let descriptor: Int32
        switch SocketProbe.connection(to: socketPath, timeout: timeout) {
        case .success(let connected): descriptor = connected
        case .failure(let problem):
            throw Failure(
                reason: problem.reason, timedOut: problem.timedOut, permissionDenied: problem.permissionDenied)
        }
        defer { close(descriptor) }
        var limit = timeval(timeout)  // sending: set by the connection already
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &limit, socklen_t(MemoryLayout<timeval>.size))

        var head = "\(method) \(path) HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n"
        for (name, value) in headers { head += "\(name): \(value)\r\n" }
        head += "Content-Length: \(body?.count ?? 0)\r\n\r\n"
        try write(Data(head.utf8) + (body ?? Data()), to: descriptor)

        var received = Data()
        var chunk = [UInt8](repeating: 0, count: 64 << 10)
        while true {
            if let answer = try parse(received, ended: false) { return answer }
            let count = read(descriptor, &chunk, chunk.count)
            if count < 0 {
                if errno == EINTR { continue }
                throw errno == EAGAIN || errno == EWOULDBLOCK
                    ? Failure(
                        reason: "bgd did not answer within \(timeout.formatted(.units(allowed: [.seconds])))",
                        timedOut: true)
                    : Failure(reason: "reading bgd's answer failed: \(String(cString: strerror(errno)))")
            }
            if count == 0 {
                guard let answer = try parse(received, ended: true) else {
                    throw Failure(reason: "bgd closed the connection before its answer was whole")
                }
                return answer
            }
            received.append(contentsOf: chunk[0..<count])
            guard received.count <= answerLimit + 64 << 10 else {
                throw Failure(reason: "bgd's answer is larger than \(answerLimit >> 20) MiB")
            }
        }
    }

    private static func write(_ data: Data, to descriptor: Int32) throws(Failure) {
        var done = 0
        while done < data.count {
            let written = data.withUnsafeBytes {
                sendWithoutSignal(descriptor, $0.baseAddress! + done, data.count - done)
            }
            if written < 0 {
                if errno == EINTR { continue }
                throw Failure(reason: "sending the request failed: \(String(cString: strerror(errno)))")
            }
            done += written
        }
    }

    /// The answer in `bytes` if it is whole: its head, then a body of Content-Length bytes, in
    /// chunks, or (with neither) up to the end of the connection. Nil while more is to come.
    static func parse(_ bytes: Data, ended: Bool) throws(Failure) -> Answer? {
        let separator = Data("\r\n\r\n".utf8)
        guard let headEnd = bytes.range(of: separator) else {
            if ended { throw Failure(reason: "bgd's answer has no complete head") }
            return nil
        }
        let head = String(decoding: bytes[bytes.startIndex..<headEnd.lowerBound], as: UTF8.self)
        let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
        let statusWords = lines[0].split(separator: " ", maxSplits: 2)
        guard statusWords.count >= 2, statusWords[0].hasPrefix("HTTP/1."), let status = Int(statusWords[1]),
            (100...599).contains(status)
        else { throw Failure(reason: "bgd's answer does not start with an HTTP/1.1 status: \(lines[0].prefix(80))") }
        var fields: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            fields[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let body = bytes[headEnd.upperBound...]
        if fields["transfer-encoding"]?.lowercased().contains("chunked") == true {
            guard let decoded = try dechunk(body) else {
                if ended { throw Failure(reason: "bgd's answer ended inside a chunk") }
                return nil
            }
            return Answer(status: status, body: decoded)
        }
        if let length = fields["content-length"] {
            guard let count = Int(length), count >= 0, count <= answerLimit else {
                throw Failure(reason: "bgd's answer has a Content-Length of \(length.prefix(20))")
            }
            guard body.count >= count else {
                if ended { throw Failure(reason: "bgd's answer ended after \(body.count) of \(count) bytes") }
                return nil
            }
            return Answer(status: status, body: Data(body.prefix(count)))
        }
        return ended ? Answer(status: status, body: Data(body)) : nil
    }

    /// The body of a chunked answer, or nil until its last chunk has come.
    private static func dechunk(_ body: Data.SubSequence) throws(Failure) -> Data? {
        var decoded = Data()
        var position = body.startIndex
        let lineEnd = Data("\r\n".utf8)
        while true {
            guard let sizeEnd = body.range(of: lineEnd, in: position..<body.endIndex) else { return nil }
            let sizeText =
                String(decoding: body[position..<sizeEnd.lowerBound], as: UTF8.self)
                .split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
            guard let size = Int(sizeText, radix: 16), size >= 0, size <= answerLimit - decoded.count else {
                throw Failure(reason: "bgd's answer has a chunk size of '\(sizeText.prefix(20))'")
            }
            let dataStart = sizeEnd.upperBound
            if size == 0 { return decoded }  // trailers, if any, are not read
            guard body.distance(from: dataStart, to: body.endIndex) >= size + 2 else { return nil }
            let dataEnd = body.index(dataStart, offsetBy: size)
            decoded.append(body[dataStart..<dataEnd])
            position = body.index(dataEnd, offsetBy: 2)
        }
    }
}

/// A bgd that closed the connection is an error to report, not a SIGPIPE that ends the tool.
private func sendWithoutSignal(_ descriptor: Int32, _ bytes: UnsafeRawPointer, _ count: Int) -> Int {
    #if canImport(Glibc)
        Glibc.send(descriptor, bytes, count, Int32(MSG_NOSIGNAL))
    #else
        var on: Int32 = 1
        setsockopt(descriptor, SOL_SOCKET, SO_NOSIGPIPE, &on, socklen_t(MemoryLayout<Int32>.size))
        return Darwin.send(descriptor, bytes, count, 0)
    #endif
}
