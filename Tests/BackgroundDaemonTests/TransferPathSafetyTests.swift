import Background
import BackgroundModel
import BackgroundStore
import BackgroundTesting
import Foundation
import Testing

/// A transfer can write or read only where it is meant to: an operator's download never lands
/// in bgd's state nor over an existing file (S1), an app uploads only regular files of its own
/// container, reached without following a link out (D6).
@Suite(.timeLimit(.minutes(5)))
struct TransferPathSafetyTests {
    func submit(
        _ daemon: TestDaemon, _ request: TransferRequest, token: String? = nil, path: String = "/v1/transfers"
    ) async throws -> RawHTTP.Answer {
        try await RawHTTP.request(
            daemon.socketPath, .POST, path, body: try WireCoding.makeEncoder().encode(request), token: token)
    }

    @Test func anOperatorDownloadNeverLandsInTheStateOrOverAFile() async throws {
        try await TestDaemon.with { daemon in
            let url = URL(string: "http://127.0.0.1:9/file")!
            let database = daemon.directory + "/state/bgd.sqlite"
            let before = try Data(contentsOf: URL(fileURLWithPath: database))
            for (destination, code) in [
                (database, "destinationProtected"),
                (daemon.directory + "/state/containers/new-file", "destinationProtected"),
                (daemon.directory + "/state/../state/bgd.sqlite-wal", "destinationProtected"),
                (daemon.directory + "/bgd.sock", "destinationExists"),
                (daemon.directory + "/no-such-directory/file", "destinationDirectoryMissing"),
                (daemon.directory + "/", "destinationInvalid"),
            ] {
                let answer = try await submit(daemon, TransferRequest(session: "s", url: url, destination: destination))
                #expect(
                    answer.errorCode == code,
                    "\(destination): \(answer.status) \(String(decoding: answer.body, as: UTF8.self))")
            }
            let existing = daemon.directory + "/mine.txt"
            try Data("keep me".utf8).write(to: URL(fileURLWithPath: existing))
            let conflict = try await submit(daemon, TransferRequest(session: "s", url: url, destination: existing))
            #expect(conflict.status == 409 && conflict.errorCode == "destinationExists")
            #expect(try String(contentsOfFile: existing, encoding: .utf8) == "keep me")
            // A link is something too: not followed, not replaced.
            let link = daemon.directory + "/link"
            try FileManager.default.createSymbolicLink(atPath: link, withDestinationPath: database)
            #expect(
                try await submit(daemon, TransferRequest(session: "s", url: url, destination: link)).errorCode
                    == "destinationExists")
            #expect(
                try await daemon.admin.send(.get, "/v1/transfers", as: [TransferRecord].self).isEmpty,
                "nothing was taken")
            #expect(try await daemon.store.integrityCheck() == "ok")
            #expect(try Data(contentsOf: URL(fileURLWithPath: database)).count >= before.count)
        }
    }

    @Test func anAppUploadsOnlyRegularFilesOfItsOwnContainer() async throws {
        try await TestDaemon.with { daemon in
            let mine = try await daemon.register("com.example.mine", command: ["/bin/true"], interval: .never)
            _ = try await daemon.register("com.example.other", command: ["/bin/true"], interval: .never)
            let container = daemon.directory + "/state/containers/com.example.mine"
            let other = daemon.directory + "/state/containers/com.example.other"
            try FileManager.default.createDirectory(atPath: container + "/sub", withIntermediateDirectories: true)
            try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
            try Data("secret".utf8).write(to: URL(fileURLWithPath: other + "/secret"))
            try Data("mine".utf8).write(to: URL(fileURLWithPath: container + "/sub/report.txt"))
            try FileManager.default.createSymbolicLink(
                atPath: container + "/escape", withDestinationPath: "/etc/passwd")
            try FileManager.default.createSymbolicLink(atPath: container + "/outside", withDestinationPath: other)
            let url = URL(string: "http://127.0.0.1:9/upload")!
            for (file, code) in [
                ("/etc/passwd", "outsideContainer"),
                (daemon.directory + "/state/bgd.sqlite", "outsideContainer"),
                (other + "/secret", "outsideContainer"),
                (container + "/../com.example.other/secret", "invalidPath"),
                (container + "/escape", "linkRefused"),
                (container + "/outside/secret", "linkRefused"),
                (container + "/sub", "notRegularFile"),
            ] {
                let answer = try await submit(
                    daemon, TransferRequest(session: "s", kind: .upload, url: url, uploadFile: file), token: mine.token,
                    path: "/v1/app/transfers")
                #expect(
                    answer.status == 400 && answer.errorCode == code,
                    "\(file): \(answer.status) \(answer.errorCode ?? "-")")
            }
            #expect(
                try await daemon.admin.send(.get, "/v1/transfers", as: [TransferRecord].self).isEmpty,
                "nothing was taken")
            let accepted = try await submit(
                daemon,
                TransferRequest(session: "s", kind: .upload, url: url, uploadFile: container + "/sub/report.txt"),
                token: mine.token,
                path: "/v1/app/transfers")
            #expect(accepted.status == 201)
            // The operator may upload its files, but never bgd's own state.
            let state = try await submit(
                daemon,
                TransferRequest(
                    session: "s", kind: .upload, url: url, uploadFile: daemon.directory + "/state/bgd.sqlite"))
            #expect(state.errorCode == "uploadFileProtected")
        }
    }
}
