import Foundation
import Testing

@testable import Background

/// The library's own memory of answered pushes, without a daemon: what an app remembers across
/// launches (its container) and how much.
struct HandledPushesTests {
    func container() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bg-sdk-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test func aLaterLaunchRemembersWhatAnEarlierOneAnswered() throws {
        let path = try container()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let first = HandledPushes(containerPath: path)
        #expect(!first.contains("a"))
        first.record("a")
        #expect(first.contains("a"))
        let second = HandledPushes(containerPath: path)
        #expect(second.contains("a") && !second.contains("b"))
    }

    @Test func onlyTheNewestAreKept() throws {
        let path = try container()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let pushes = HandledPushes(containerPath: path)
        for index in 0...HandledPushes.limit { pushes.record("p\(index)") }
        #expect(!pushes.contains("p0") && pushes.contains("p1") && pushes.contains("p\(HandledPushes.limit)"))
        #expect(!HandledPushes(containerPath: path).contains("p0"))
    }

    @Test func withoutAContainerItRemembersInMemoryOnly() {
        let pushes = HandledPushes(containerPath: nil)
        pushes.record("x")
        #expect(pushes.contains("x"))
        #expect(!HandledPushes(containerPath: nil).contains("x"))
    }
}
