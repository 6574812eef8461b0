import BackgroundModel
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

    /// The app as the user runs it remembers what a launched process answered: one that read its
    /// token from bgd's state directory keeps its list in the container beside it, and one given
    /// only its token attaches the container bgd names, keeping what it had answered meanwhile.
    /// Before, both kept theirs in memory, and a push a launched process had answered (its run
    /// cut short by bgd's crash) was handled again by the user's instance.
    @Test func theUsersInstanceRemembersWhatALaunchedOneAnswered() throws {
        let state = try container()
        defer { try? FileManager.default.removeItem(atPath: state) }
        let app = AppID(rawValue: "com.example.remembering")!
        let container = state + "/containers/" + app.rawValue
        try FileManager.default.createDirectory(atPath: container, withIntermediateDirectories: true)
        try "token\n".write(toFile: container + "/app-token", atomically: true, encoding: .utf8)
        HandledPushes(containerPath: container).record("answered-by-the-launched-one")

        let user = try BackgroundApplication(appID: app, stateDirectory: state, socketPath: state + "/none.sock")
        #expect(user.containerPath == container)
        #expect(user.handledPushes.contains("answered-by-the-launched-one"))

        let given = HandledPushes(containerPath: nil)
        given.record("answered-here")
        #expect(!given.isKept && !given.contains("answered-by-the-launched-one"))
        given.attach(containerPath: container)
        #expect(given.isKept && given.contains("answered-by-the-launched-one") && given.contains("answered-here"))
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
