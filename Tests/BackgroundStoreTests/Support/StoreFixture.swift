import BackgroundModel
import BackgroundStore
import Foundation

/// An in-memory store with one registered app, and the pushes, transfers and task requests the
/// store's tests give it.
struct StoreFixture {
    let now = Date(timeIntervalSince1970: 1_767_603_600)
    let app = AppID(rawValue: "com.example.a")!
    let store: BackgroundStore

    init(taskIdentifiers: [String] = ["com.example.a.work", "com.example.a.refresh"]) async throws {
        store = try BackgroundStore.inMemory()
        _ = try await store.register(
            RegisterAppRequest(
                id: app, launchCommand: LaunchCommand(["/bin/true"])!, fetchInterval: .minimum,
                taskIdentifiers: taskIdentifiers),
            tokenHash: "h", now: now)
    }

    func backgroundPush(_ number: Int, collapseID: String? = nil) -> NewPush {
        NewPush(
            app: app, apnsID: String(format: "00000000-0000-0000-0000-%012d", number), pushType: "background",
            priority: 5, collapseID: collapseID, expiration: nil, payload: Data(#"{"n":\#(number)}"#.utf8))
    }

    /// A download for the app, created now.
    func download(session: String = "s") async throws -> StoredTransfer {
        try await store.createTransfer(
            TransferRequest(session: session, url: URL(string: "http://127.0.0.1/file")!), app: app, now: now
        ) { id in ("/tmp/\(id).partial", "/tmp/\(id)") }
    }
}
