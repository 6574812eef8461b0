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

    /// Handlers answering at once (several pushes in flight): every id reaches the file. Before,
    /// each wrote the list as it stood when it added its id, and an older list could land last.
    @Test func pushesAnsweredAtOnceAreAllRemembered() async throws {
        let path = try container()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let pushes = HandledPushes(containerPath: path)
        var lost: [String] = []
        for round in 0..<300 {
            // Two answers at once, as two handlers finish together; the file must hold both.
            await withTaskGroup(of: Void.self) { group in
                for handler in 0..<2 { group.addTask { pushes.record("r\(round)-\(handler)") } }
            }
            let later = HandledPushes(containerPath: path)
            lost += ["r\(round)-0", "r\(round)-1"].filter { !later.contains($0) }
        }
        #expect(lost.isEmpty, "\(lost.count) ids lost from the file: \(lost.prefix(4))")
    }

    @Test func withoutAContainerItRemembersInMemoryOnly() {
        let pushes = HandledPushes(containerPath: nil)
        pushes.record("x")
        #expect(pushes.contains("x"))
        #expect(!HandledPushes(containerPath: nil).contains("x"))
    }
}
