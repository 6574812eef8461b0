import BackgroundModel
import Foundation
import Testing

@testable import Background

/// The library's own memory of answered pushes and handed-over transfer events, without a daemon: what an app remembers across
/// launches (its container) and how much.
struct HandledLedgerTests {
    func container() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("bg-sdk-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }

    @Test func aLaterLaunchRemembersWhatAnEarlierOneAnswered() throws {
        let path = try container()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let first = HandledLedger.pushes(containerPath: path)
        #expect(!first.contains("a"))
        first.record("a")
        #expect(first.contains("a"))
        let second = HandledLedger.pushes(containerPath: path)
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
        HandledLedger.pushes(containerPath: container).record("answered-by-the-launched-one")

        let user = try BackgroundApplication(appID: app, stateDirectory: state, socketPath: state + "/none.sock")
        #expect(user.containerPath == container)
        #expect(user.handledPushes.contains("answered-by-the-launched-one"))

        let given = HandledLedger.pushes(containerPath: nil)
        given.record("answered-here")
        #expect(!given.isKept && !given.contains("answered-by-the-launched-one"))
        given.attach(containerPath: container)
        #expect(given.isKept && given.contains("answered-by-the-launched-one") && given.contains("answered-here"))
    }

    /// The app's two processes at once: what one records after the other attached is seen by
    /// the other, and neither's write loses the other's. Before, the file was read once, at
    /// attach, and a push a launched process answered later was handled again by the user's.
    @Test func whatTheOtherProcessRecordsLaterIsSeen() throws {
        let path = try container()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let user = HandledLedger.pushes(containerPath: path)
        let launched = HandledLedger.pushes(containerPath: path)
        launched.record("later")
        #expect(user.contains("later"))
        user.record("mine")
        #expect(launched.contains("mine"))
        let third = HandledLedger.pushes(containerPath: path)
        #expect(third.contains("later") && third.contains("mine"), "the user's write kept the launched one's")
    }

    /// The app's two processes record at the same moment (each its own ledger on the one
    /// file): the file keeps both. Before, each read the file, added its own and renamed its
    /// copy into place, and the later rename dropped the other's.
    @Test func twoProcessesRecordingAtOnceBothKeepTheirs() async throws {
        let path = try container()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let ledgers = [HandledLedger.pushes(containerPath: path), HandledLedger.pushes(containerPath: path)]
        var lost: [String] = []
        for round in 0..<200 {
            await withTaskGroup(of: Void.self) { group in
                for (index, ledger) in ledgers.enumerated() { group.addTask { ledger.record("r\(round)-\(index)") } }
            }
            let later = HandledLedger.pushes(containerPath: path)
            lost += ["r\(round)-0", "r\(round)-1"].filter { !later.contains($0) }
        }
        #expect(lost.isEmpty, "\(lost.count) ids lost from the file: \(lost.prefix(4))")
    }

    /// A transfer's event is known by its number and its creation: an app registered anew under
    /// the same id numbers its events from 1 again. Pushes and events are kept apart.
    @Test func transferEventsAreKnownByNumberAndCreation() throws {
        let path = try container()
        defer { try? FileManager.default.removeItem(atPath: path) }
        func event(_ seq: Int64, at seconds: TimeInterval) -> AppEvent {
            AppEvent(
                seq: EventSequence(rawValue: seq), createdAt: Date(timeIntervalSince1970: seconds),
                body: .sessionEventsFinished(session: "s"))
        }
        let events = HandledLedger.transferEvents(containerPath: path)
        events.record(HandledLedger.key(of: event(1, at: 1_000)))
        #expect(events.contains(HandledLedger.key(of: event(1, at: 1_000))))
        #expect(!events.contains(HandledLedger.key(of: event(1, at: 2_000))))
        #expect(!HandledLedger.pushes(containerPath: path).contains(HandledLedger.key(of: event(1, at: 1_000))))
    }

    @Test func onlyTheNewestAreKept() throws {
        let path = try container()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let pushes = HandledLedger.pushes(containerPath: path)
        for index in 0...HandledLedger.limit { pushes.record("p\(index)") }
        #expect(!pushes.contains("p0") && pushes.contains("p1") && pushes.contains("p\(HandledLedger.limit)"))
        #expect(!HandledLedger.pushes(containerPath: path).contains("p0"))
    }

    /// Handlers answering at once (several pushes in flight): every id reaches the file. Before,
    /// each wrote the list as it stood when it added its id, and an older list could land last.
    @Test func pushesAnsweredAtOnceAreAllRemembered() async throws {
        let path = try container()
        defer { try? FileManager.default.removeItem(atPath: path) }
        let pushes = HandledLedger.pushes(containerPath: path)
        var lost: [String] = []
        for round in 0..<300 {
            // Two answers at once, as two handlers finish together; the file must hold both.
            await withTaskGroup(of: Void.self) { group in
                for handler in 0..<2 { group.addTask { pushes.record("r\(round)-\(handler)") } }
            }
            let later = HandledLedger.pushes(containerPath: path)
            lost += ["r\(round)-0", "r\(round)-1"].filter { !later.contains($0) }
        }
        #expect(lost.isEmpty, "\(lost.count) ids lost from the file: \(lost.prefix(4))")
    }

    @Test func withoutAContainerItRemembersInMemoryOnly() {
        let pushes = HandledLedger.pushes(containerPath: nil)
        pushes.record("x")
        #expect(pushes.contains("x"))
        #expect(!HandledLedger.pushes(containerPath: nil).contains("x"))
    }
}
