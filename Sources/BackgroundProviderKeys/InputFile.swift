import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// A file a command was given that it cannot use. Not ArgumentParser's `ValidationError`: a
/// missing or malformed file is not a mistake in the command line, so no usage should follow it,
/// and bgctl exits with sysexits' status for it (EX_NOINPUT, EX_DATAERR) instead of the usage status.
public struct InputFileProblem: Error, CustomStringConvertible {
    public enum Kind: Sendable {
        /// It could not be opened or read (EX_NOINPUT): the OS's reason is said.
        case unreadable
        /// It was read, and is not what it should be (EX_DATAERR).
        case malformed
    }

    public let kind: Kind
    public let description: String

    public init(_ kind: Kind, _ description: String) {
        self.kind = kind
        self.description = description
    }

    /// The machine-readable code `--json` errors carry.
    public var code: String { kind == .unreadable ? "fileUnreadable" : "fileMalformed" }
}

/// Reads the files named on a command line (keys, payloads, manifests, traces) so that one that
/// cannot be opened is reported as such — "no such file: PATH" — and never as one in the wrong
/// format, which is all `FileManager.contents(atPath:)`'s nil would let a caller say.
public enum InputFile {
    /// What a key, a payload or a manifest may weigh: far more than any of them does.
    public static let defaultLimit = 1 << 20

    /// The whole file, up to `limit` bytes: a larger one — or a device that never ends, such as
    /// /dev/zero — is refused once `limit` is passed, not read into memory for ever.
    public static func contents(_ path: String, limit: Int = defaultLimit) throws(InputFileProblem) -> Data {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw problem(path, errno) }
        defer { close(descriptor) }
        var data = Data()
        var buffer = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count == 0 { return data }
            if count < 0 {
                if errno == EINTR { continue }
                throw problem(path, errno)
            }
            guard data.count + count <= limit else {
                throw InputFileProblem(.malformed, "\(path) is larger than \(describe(limit)); no file this command reads is")
            }
            data.append(contentsOf: buffer[0..<count])
        }
    }

    /// The file as UTF-8 text; `what` names what it should hold ("a trace"), for the complaint
    /// when it holds something else.
    public static func text(_ path: String, what: String, limit: Int = defaultLimit) throws(InputFileProblem) -> String {
        guard let text = String(data: try contents(path, limit: limit), encoding: .utf8) else {
            throw InputFileProblem(.malformed, "\(path) is not UTF-8 text (\(what) was expected)")
        }
        return text
    }

    private static func describe(_ bytes: Int) -> String {
        bytes >= 1 << 20 ? "\(bytes >> 20) MiB" : "\(bytes >> 10) KiB"
    }

    private static func problem(_ path: String, _ code: Int32) -> InputFileProblem {
        if code == ENOENT { return InputFileProblem(.unreadable, "no such file: \(path)") }
        // strerror's sentence-case ("Permission denied") reads oddly after a colon mid-sentence.
        return InputFileProblem(.unreadable, "cannot read \(path): \(String(cString: strerror(code)).lowercased())")
    }
}
