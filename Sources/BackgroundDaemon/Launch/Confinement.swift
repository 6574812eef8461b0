import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// What a process bgd launches may touch on the file system (docs/security.md): read and run
/// everything but `hidden` (bgd's state directory — every other app's container in it — and the
/// operator token), write only its own container and /dev. Enforced by Landlock through the
/// `bgd-confine` helper where the kernel has it.
public struct Confinement: Sendable, Equatable {
    /// Subtrees the app may not even read.
    public var hidden: [String]
    /// Subtrees it may read and write (its container).
    public var writable: [String]

    public init(hidden: [String], writable: [String]) {
        self.hidden = hidden.map(Self.canonical)
        self.writable = writable.map(Self.canonical)
    }

    /// The helper's arguments: Landlock only grants, so "everything but the hidden subtrees" is
    /// spelled as every sibling along the way down to each of them (the ancestors themselves
    /// stay ungranted — a path is still walked through them, not listed).
    public func helperArguments() -> [String] {
        var readable: [String] = []
        collect(under: "/", into: &readable)
        return readable.flatMap { ["--read", $0] } + (writable + ["/dev"]).flatMap { ["--write", $0] }
    }

    private func collect(under directory: String, into readable: inout [String]) {
        guard let entries = try? FileManager.default.contentsOfDirectory(atPath: directory) else { return }
        for entry in entries.sorted() {
            let path = (directory == "/" ? "" : directory) + "/" + entry
            if hidden.contains(path) { continue }
            // A link is granted where it leads, and where it leads is walked in its own place: a
            // rule for it would land on its target, and one leading to an ancestor of a hidden
            // subtree (Silverblue's /home → var/home, a link in ~) granted the subtree to read.
            var info = stat()
            if lstat(path, &info) != 0 || (info.st_mode & S_IFMT) == S_IFLNK { continue }
            if hidden.contains(where: { $0.hasPrefix(path + "/") }) {
                collect(under: path, into: &readable)
            } else {
                readable.append(path)
            }
        }
    }

    /// The path with its links resolved (the rules name real places).
    static func canonical(_ path: String) -> String {
        guard let resolved = realpath(path, nil) else { return path }
        defer { free(resolved) }
        return String(cString: resolved)
    }

    /// Where `bgd-confine` is: beside the running executable (bgd, or a test runner in the same
    /// build directory); nil when it is not there.
    public static func helperPath() -> String? {
        guard let executable = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else {
            return nil
        }
        let candidate = (executable as NSString).deletingLastPathComponent + "/bgd-confine"
        return access(candidate, X_OK) == 0 ? candidate : nil
    }

    /// How launched apps are confined here, found once at start.
    public enum Mode: Sendable, Equatable, CustomStringConvertible {
        /// Landlock, with the kernel's ABI version.
        case landlock(abi: Int)
        /// Not confined, and why.
        case unconfined(String)

        public var description: String {
            switch self {
            case .landlock(let abi): "landlock (ABI \(abi)): apps read all but bgd's state, write only their container"
            case .unconfined(let why): "unconfined: \(why)"
            }
        }
    }

    /// Asks the helper whether the kernel has Landlock.
    public static func probe(helper: String?) -> Mode {
        #if os(Linux)
            guard let helper else {
                return .unconfined("bgd-confine is not beside bgd (build it: swift build --product bgd-confine)")
            }
            var pid: pid_t = 0
            let argv = [strdup(helper), strdup("--probe"), nil]
            defer { argv.forEach { free($0) } }
            guard posix_spawn(&pid, helper, nil, nil, argv, environ) == 0 else {
                return .unconfined("cannot run \(helper)")
            }
            var status: Int32 = 0
            while waitpid(pid, &status, 0) == -1 && errno == EINTR {}
            let abi = (status >> 8) & 0xff
            return abi > 0 ? .landlock(abi: Int(abi)) : .unconfined("this kernel has no Landlock")
        #else
            return .unconfined("Landlock is Linux's")
        #endif
    }
}
