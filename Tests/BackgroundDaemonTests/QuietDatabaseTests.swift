import BackgroundTesting
import Foundation
import GRDB
import QuietThreads
import Synchronization
import Testing

/// GRDB guards its connections with dispatch queues, and two threads meeting at one hand the rest
/// to a libdispatch worker, whose monitor then wakes the process every second for as long as it
/// lives (one start of bgd in eight did). `QuietDatabase` enters each queue from one thread only:
/// reads one at a time on theirs, writes on theirs, so a read still goes on beside a write.
@Suite(.timeLimit(.minutes(2)))
struct QuietDatabaseTests {
    @Test func readsRunOneAtATimeOnTheirThreadBesideTheWrites() async throws {
        let directory = TemporaryDirectory.make()
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let database = QuietDatabase(
            try DatabasePool(path: directory + "/quiet.sqlite"), readers: WorkerThreads(count: 1, name: "quiet-read"),
            writers: WorkerThreads(count: 1, name: "quiet-write"))
        try await database.write { db in
            try db.execute(sql: "CREATE TABLE t(x INTEGER)")
            for x in 0..<5000 { try db.execute(sql: "INSERT INTO t VALUES (?)", arguments: [x]) }
        }

        let overlap = Overlap()
        try await withThrowingTaskGroup(of: String?.self) { group in
            for _ in 0..<40 {
                group.addTask {
                    try await database.read { db in
                        overlap.enter()
                        defer { overlap.leave() }
                        _ = try Int.fetchOne(db, sql: "SELECT sum(x * x) FROM t")
                        return Thread.current.name
                    }
                }
            }
            for try await name in group { #expect(name == "quiet-read") }
        }
        #expect(overlap.most == 1, "reads met")

        // A read held open does not hold a write back.
        let gate = Gate()
        let reading = Task { try await database.read { _ in gate.enterAndWait() } }
        #expect(await eventually { gate.entered })
        let writer = try await database.write { db -> String? in
            try db.execute(sql: "INSERT INTO t VALUES (1)")
            return Thread.current.name
        }
        #expect(writer == "quiet-write")
        gate.open()
        try await reading.value
    }

    /// A database of one connection has one queue: its reads go to the writers' thread.
    @Test func aSingleConnectionReadsOnTheWritersThread() async throws {
        let database = QuietDatabase(
            try DatabaseQueue(), readers: WorkerThreads(count: 1, name: "quiet-read"),
            writers: WorkerThreads(count: 1, name: "quiet-write"))
        #expect(try await database.read { _ in Thread.current.name } == "quiet-write")
    }

    /// A store's threads end with it (a test process opens hundreds of stores), once the jobs
    /// given them have run.
    @Test func workerThreadsEndWithTheirOwner() async throws {
        func threads() -> Int {
            let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? []
            return tasks.filter {
                (try? String(contentsOfFile: "/proc/self/task/\($0)/comm", encoding: .utf8))?.hasPrefix("ending-worker")
                    == true
            }.count
        }
        var workers: WorkerThreads? = WorkerThreads(count: 2, name: "ending-worker")
        #expect(try await workers?.run { 6 * 7 } == 42)
        #expect(threads() == 2)
        workers = nil
        #expect(await eventually { threads() == 0 })
    }

    /// How many reads were inside at once, at most.
    final class Overlap: Sendable {
        private let counts = Mutex((inside: 0, most: 0))
        var most: Int { counts.withLock { $0.most } }
        func enter() {
            counts.withLock {
                $0.inside += 1
                $0.most = max($0.most, $0.inside)
            }
        }
        func leave() { counts.withLock { $0.inside -= 1 } }
    }

    /// A read that waits until the test opens it.
    final class Gate: @unchecked Sendable {
        private let condition = NSCondition()
        private var isOpen = false
        private var hasEntered = false

        var entered: Bool {
            condition.lock()
            defer { condition.unlock() }
            return hasEntered
        }

        func enterAndWait() {
            condition.lock()
            hasEntered = true
            while !isOpen { condition.wait() }
            condition.unlock()
        }

        func open() {
            condition.lock()
            isOpen = true
            condition.broadcast()
            condition.unlock()
        }
    }
}
