import BackgroundModel
import Foundation
import Testing

@testable import Background

#if canImport(Glibc)
    import Glibc
#endif

/// What an app matches on when bgd refuses: typed codes, and a code this library does not know
/// yet still readable as text.
struct BackgroundErrorTests {
    @Test func apiErrorsCarryTheirTypedCode() {
        let error = BackgroundError.api(status: 409, code: "runAlreadyEnded", reason: "run 7 already ended")
        #expect(error.apiErrorCode == .runAlreadyEnded && error.httpStatus == 409)
        #expect(error.description == "run 7 already ended")
        let newer = BackgroundError.api(status: 400, code: "somethingNewer", reason: "…")
        #expect(newer.apiErrorCode == nil && newer.apiCode == "somethingNewer")
        #expect(BackgroundError.disconnected.apiErrorCode == nil && BackgroundError.disconnected.httpStatus == nil)
    }

    @Test func errorsCompareByKindNotByWording() {
        #expect(
            BackgroundError.api(status: 404, code: "unknownApp", reason: "a")
                == .api(status: 404, code: "unknownApp", reason: "b"))
        #expect(BackgroundError.daemonUnreachable("/a", "x") == .daemonUnreachable("/b", "y"))
        #expect(BackgroundError.daemonUnreachable("/a", "x") != .disconnected)
    }

    /// A bgd that takes the request and does not answer in time runs, busy or stuck: it is said
    /// so, with what to do, on both transports — not "cannot reach bgd; is it running?", which
    /// sent people starting a second one. No socket at all is still "unreachable".
    @Test(.timeLimit(.minutes(1))) func aBgdThatDoesNotAnswerInTimeIsNotCalledUnreachable() async throws {
        let directory = NSTemporaryDirectory() + "bg-unresponsive-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = directory + "/bgd.sock"
        // Listening, never accepting: the connection waits in the backlog, the request is sent,
        // no answer ever comes.
        let listener = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try #require(listener >= 0)
        defer { close(listener) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in path.utf8.enumerated() { raw[i] = byte }
        }
        let listening = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0 && listen(listener, 8) == 0
            }
        }
        try #require(listening)
        for transport in [DaemonClient.Transport.direct, .eventLoop] {
            let client = DaemonClient(socketPath: path, token: "t", transport: transport)
            await #expect {
                try await client.send(.get, "/v1/apps", as: [String].self, timeout: .milliseconds(300))
            } throws: { error in
                guard let error = error as? BackgroundError else { return false }
                return error.isDaemonUnresponsive && !error.isDaemonUnreachable
                    && error.reason.contains("did not answer within") && error.reason.contains("busy or stuck")
            }
        }
        // A bgd that accepts nothing for long (stopped): once its queue is full, a call still
        // gives up in its time, as unresponsive. Before, the connection waited for room without end.
        var queued: [Int32] = []
        defer { queued.forEach { close($0) } }
        for _ in 0..<64 {
            let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            queued.append(descriptor)
            let connected = withUnsafePointer(to: &address) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
                }
            }
            if !connected { break }  // the queue is full
        }
        for transport in [DaemonClient.Transport.direct, .eventLoop] {
            let client = DaemonClient(socketPath: path, token: "t", transport: transport)
            await #expect {
                try await client.send(.get, "/v1/apps", as: [String].self, timeout: .milliseconds(300))
            } throws: { error in
                (error as? BackgroundError)?.isDaemonUnresponsive == true
            }
        }
        let gone = DaemonClient(socketPath: directory + "/none.sock", token: "t", transport: .direct)
        await #expect {
            try await gone.send(.get, "/v1/apps", as: [String].self, timeout: .milliseconds(300))
        } throws: { error in (error as? BackgroundError)?.isDaemonUnreachable == true }
    }

    /// A foreground app whose token is not where it looks (a bgd on another --state-dir) is told
    /// how to give it one.
    @Test func aMissingTokenSaysHowToGiveOne() {
        let app = AppID(rawValue: "com.example.elsewhere")!
        #expect {
            try BackgroundApplication(appID: app, stateDirectory: "/nonexistent-bgd-state")
        } throws: { error in
            let text = "\(error)"
            return text.contains("/nonexistent-bgd-state/containers/com.example.elsewhere/app-token")
                && text.contains("BGD_APP_TOKEN") && text.contains("bgctl token com.example.elsewhere")
        }
    }
}
