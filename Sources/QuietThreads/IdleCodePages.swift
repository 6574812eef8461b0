import BackgroundModel
import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// Gives the kernel back the code pages a burst of work touched, once the process has been quiet
/// for a while: one wake after each burst, none while it stays idle. bgd feeds it its activity
/// feed; bgrelay, every provider request and uplink round.
///
/// A Swift binary is large (bgd's code is some 33 MB, its Swift and Foundation libraries as much
/// again) and starting, or serving a request, runs code scattered across all of it; the kernel
/// maps 64 KB around every page fault in a file ("fault-around"), so an idle bgd showed 30–40 MB
/// of code resident although it runs almost none of it while idle. Those pages are clean copies
/// of files in the page cache, never written, so `MADV_DONTNEED` on the read-execute mappings
/// only unmaps them: whatever runs again is faulted back from the page cache (a minor fault).
/// The writable and RELRO mappings, which hold relocated data, are never touched: dropping them
/// would lose the relocations. `BGD_KEEP_CODE_PAGES=1` (bgd) and `BGRELAY_KEEP_CODE_PAGES=1`
/// (bgrelay) turn this off, to compare.
public final class IdleCodePages: Sendable {
    let clock: any WallClock
    /// How long the process must be quiet (no `noteActivity`) before the pages go.
    public let quietPeriod: Duration

    /// What giving the pages back does (`releaseCodePages`; tests count the calls instead).
    let release: @Sendable () -> Void
    /// When something last happened (starting counts), and whether a release has answered it.
    private let lastActivity: Mutex<(at: Date, released: Bool)>
    /// Wakes `run` after activity (coalesced: one pending kick is enough).
    private let kicks: AsyncStream<Void>
    private let kick: AsyncStream<Void>.Continuation

    /// `startingNow`: the first quiet period starts now (starting is activity); otherwise at the
    /// first `noteActivity` — a process that starts slowly says when it has started, or a
    /// release in the middle of starting is faulted straight back.
    public init(
        clock: any WallClock, quietPeriod: Duration = .seconds(30), startingNow: Bool = true,
        release: @escaping @Sendable () -> Void = { IdleCodePages.releaseCodePages() }
    ) {
        self.clock = clock
        self.quietPeriod = quietPeriod
        self.release = release
        lastActivity = Mutex((clock.now, !startingNow))
        (kicks, kick) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        if startingNow { kick.yield() }
    }

    /// When the last activity was seen.
    public var lastActivityAt: Date { lastActivity.withLock { $0.at } }

    /// Whether giving pages back is on: unless `variable` (`BGD_KEEP_CODE_PAGES`, say) is set.
    public static func isEnabled(unless variable: String) -> Bool {
        ProcessInfo.processInfo.environment[variable] == nil
    }

    /// Something happened: the quiet period starts again. Cheap (a lock and a coalesced kick),
    /// so it may be called on every request.
    public func noteActivity() {
        let now = clock.now
        lastActivity.withLock { $0 = (now, false) }
        // Always: a kick while the loop sleeps waits for it, and one skipped because the loop
        // seemed to be waiting could meet a release in flight and leave nothing to wake it.
        kick.yield()
    }

    /// Gives the pages back after each quiet period, until the task is cancelled.
    public func run() async {
        await withTaskCancellationHandler {
            for await _ in kicks {
                while !Task.isCancelled {
                    let last = lastActivity.withLock { $0 }
                    if last.released { break }
                    let deadline = last.at.adding(quietPeriod)
                    if clock.now >= deadline {
                        release()
                        lastActivity.withLock { if $0.at == last.at { $0.released = true } }
                        break
                    }
                    do { try await clock.sleep(until: deadline) } catch { return }
                }
            }
        } onCancel: {
            kick.finish()
        }
    }

    /// Unmaps every file-backed read-execute mapping of this process that holds no page of its
    /// own (a text relocation, a debugger's breakpoint: `Private_Dirty` or `Anonymous` above zero
    /// — dropping those would lose the writes); returns the bytes they span (not all resident).
    /// The mappings are listed first and unmapped after, in a loop that calls nothing but
    /// `madvise`: parsing between the calls would run — and so fault back — the Swift and
    /// Foundation code just unmapped.
    @discardableResult
    public static func releaseCodePages() -> Int {
        guard let smaps = readWhole("/proc/self/smaps") else { return 0 }
        var ranges: [(start: UInt, length: Int)] = []
        var current: (start: UInt, length: Int)?
        var clean = true
        func close() {
            if let range = current, clean { ranges.append(range) }
            current = nil
        }
        for line in smaps.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard let first = fields.first else { continue }
            if !first.hasSuffix(":") {
                // A mapping's header: address perms offset device inode [path]
                close()
                clean = true
                guard fields.count >= 6, fields[1] == "r-xp", fields[5].hasPrefix("/") else { continue }
                let bounds = first.split(separator: "-")
                if bounds.count == 2, let start = UInt(bounds[0], radix: 16), let end = UInt(bounds[1], radix: 16),
                    end > start
                {
                    current = (start, Int(end - start))
                }
            } else if current != nil, first == "Private_Dirty:" || first == "Anonymous:", fields.count >= 2,
                fields[1] != "0"
            {
                clean = false
            }
        }
        close()
        var released = 0
        ranges.withUnsafeBufferPointer { ranges in
            for index in 0..<ranges.count {
                if madvise(UnsafeMutableRawPointer(bitPattern: ranges[index].start), ranges[index].length, MADV_DONTNEED) == 0 {
                    released &+= ranges[index].length
                }
            }
        }
        return released
    }

    /// A /proc file, whole: it has no size to read up to, and one read returns at most a page.
    public static func readWhole(_ path: String) -> String? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes.append(contentsOf: chunk[..<count])
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
