/// The argv bgd executes to launch an app in the background. Never a shell string: no quoting
/// rules, no injection. `arguments[0]` is an absolute path or a name looked up on `PATH`.
public struct LaunchCommand: Hashable, Codable, Sendable, CustomStringConvertible {
    public let arguments: [String]

    /// Fails for an empty argv, an empty program name, more than 256 arguments, more than 64 KiB
    /// in all, or a NUL byte anywhere (execve could not pass it).
    public init?(_ arguments: [String]) {
        guard let program = arguments.first, !program.isEmpty, arguments.count <= 256 else { return nil }
        guard arguments.reduce(0, { $0 + $1.utf8.count }) <= 64 * 1024 else { return nil }
        guard !arguments.contains(where: { $0.utf8.contains(0) }) else { return nil }
        self.arguments = arguments
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        guard let command = LaunchCommand(try container.decode([String].self)) else {
            throw DecodingError.dataCorruptedError(in: container, debugDescription: Self.requirement)
        }
        self = command
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(arguments)
    }

    public var program: String { arguments[0] }

    public var description: String {
        arguments.map { $0.contains(" ") || $0.isEmpty ? "'\($0)'" : $0 }.joined(separator: " ")
    }

    public static let requirement =
        "a launch command is a non-empty argv (program first, at most 256 arguments and 64 KiB, no NUL bytes)"
}
