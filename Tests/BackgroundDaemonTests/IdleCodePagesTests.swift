import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

@testable import BackgroundDaemon

/// bgd gives its code pages back once quiet (issue 17's ≤ 20 MB idle): once per burst of work,
/// 30 s after its last event, never while it stays idle — and unmapping them leaves the process
/// running.
@Suite(.timeLimit(.minutes(5)))
struct IdleCodePagesTests {
    @Test func thePagesGoOnceAfterEachQuietPeriod() async throws {
        let clock = ManualClock()
        let start = clock.now
        let feed = ActivityFeed()
        let (releases, released) = AsyncStream<Date>.makeStream()
        let service = IdleCodePages(activity: feed, clock: clock, quietPeriod: .seconds(30)) {
            released.yield(clock.now)
        }
        let app = AppID(rawValue: "com.example.idle")!
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await service.run() }
            var next = releases.makeAsyncIterator()
            // Starting counts as a burst: 30 s of quiet later, the pages go.
            clock.advance(by: .seconds(30))
            #expect(await next.next() == start.addingTimeInterval(30))

            // A burst of two events 20 s apart: nothing goes until 30 s after the second.
            func happen() async {
                feed.emit(.appRegistered(app))
                let now = clock.now
                #expect(await eventually { service.lastActivityAt == now })
            }
            clock.advance(by: .seconds(100))  // idle: no release without activity
            await happen()
            clock.advance(by: .seconds(20))
            await happen()
            clock.advance(by: .seconds(20))  // 40 s after the first, 20 after the second
            clock.advance(by: .seconds(10))
            #expect(await next.next() == start.addingTimeInterval(30 + 100 + 20 + 30))
            group.cancelAll()
        }
    }

    /// The real thing, in this process: every read-execute file mapping is unmapped, and the code
    /// that runs next is faulted back from the page cache.
    @Test func unmappingTheCodeLeavesTheProcessRunning() throws {
        func residentCode() -> Int {
            let smaps = IdleCodePages.readWhole("/proc/self/smaps") ?? ""
            var total = 0
            var inCode = false
            for line in smaps.split(separator: "\n") {
                let fields = line.split(separator: " ", omittingEmptySubsequences: true)
                if fields.count >= 5, fields[0].contains("-"), fields[0].allSatisfy({ $0.isHexDigit || $0 == "-" }) {
                    inCode = fields[1] == "r-xp" && fields.count >= 6 && fields[5].hasPrefix("/")
                } else if inCode, fields.first == "Rss:", let kilobytes = Int(fields[1]) {
                    total += kilobytes
                }
            }
            return total
        }
        let maps = try #require(IdleCodePages.readWhole("/proc/self/maps"))
        #expect(maps.split(separator: "\n").count > 100, "read whole, not one page of it")
        let before = residentCode()
        let spanned = IdleCodePages.releaseCodePages()
        let after = residentCode()
        #expect(spanned > 10 << 20)
        #expect(after < before, "resident code \(before) kB → \(after) kB")
        #expect([3, 1, 2].sorted() == [1, 2, 3], "and code still runs")
    }
}
