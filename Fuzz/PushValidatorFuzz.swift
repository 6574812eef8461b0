import Foundation

/// libFuzzer target over the push gateway's pure validators: the request rules
/// (`PushRequestValidator`) and the provider token parser (`ProviderToken`). The input is split
/// as a request: "METHOD PATH\n", header lines "name: value\n", a blank line, then the body.
/// Built and run by Fuzz/run.sh (not part of `swift test`).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzPushValidator(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Data(bytes: data, count: size)
    let separator = input.firstRange(of: Data("\n\n".utf8))
    let head = String(decoding: separator.map { input[..<$0.lowerBound] } ?? input, as: UTF8.self)
    let body = separator.map { Data(input[$0.upperBound...]) } ?? Data()
    var lines = head.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
    let requestLine = lines.isEmpty ? "" : lines.removeFirst()
    let parts = requestLine.split(separator: " ", maxSplits: 1).map(String.init)
    let headers = lines.compactMap { line -> (name: String, value: String)? in
        guard let colon = line.firstIndex(of: ":") else { return nil }
        return (String(line[..<colon]), String(line[line.index(after: colon)...]).trimmingCharacters(in: .whitespaces))
    }
    _ = PushRequestValidator.validate(
        method: parts.first ?? "", path: parts.count > 1 ? parts[1] : "", headers: headers, body: body,
        bodySize: min(body.count, PushRequestValidator.maximumPayload + 1))
    if let authorization = headers.first(where: { $0.name.lowercased() == "authorization" })?.value {
        if case .success(let token) = ProviderToken.parse(authorization: authorization) {
            var clock = ProviderTokenClock()
            _ = clock.admit(token, now: Date(timeIntervalSince1970: 1_767_603_600))
        }
    }
    return 0
}
