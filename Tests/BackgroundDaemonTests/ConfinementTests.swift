import Background
import BackgroundDaemon
import BackgroundModel
import BackgroundTesting
import Foundation
import Testing

/// A process bgd launches reads what any program may (the system, its own binary) and writes
/// only its container; bgd's state — the database, every other app's container — and the
/// operator token are out of its reach, where the kernel has Landlock (D4).
@Suite(.timeLimit(.minutes(5)))
struct ConfinementTests {
    @Test func aLaunchedAppIsConfinedToItsContainer() async throws {
        try await TestDaemon.with { daemon in
            guard case .landlock = daemon.daemon.confinement else {
                // A kernel without Landlock: bgd must say so, and run apps unconfined.
                let status = try await daemon.admin.send(.get, "/v1/status", as: DaemonStatus.self)
                #expect(status.appConfinement?.hasPrefix("unconfined: ") == true, "\(status.appConfinement ?? "-")")
                return
            }
            let state = daemon.directory + "/state"
            // Each probe: "name ok" if the attempt succeeded, "name refused" if not.
            let script = #"""
                c="$BGD_CONTAINER"
                try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name ok"; else echo "$name refused"; fi; }
                {
                try system cat /etc/hostname
                try own-write sh -c "echo mine > '$c/mine'"
                try tmp-write sh -c 'echo t > "$TMPDIR/t"'
                try database cat "$STATE/bgd.sqlite"
                try other-app cat "$STATE/containers/com.example.other/secret"
                try state-list ls "$STATE"
                try token cat "$BGD_SOCKET.operator-token"
                try write-outside sh -c "echo x > '$OUTSIDE/planted'"
                } > "$c/probes"
                """#
            _ = try await daemon.register("com.example.other", command: ["/bin/true"], interval: .never)
            try FileManager.default.createDirectory(
                atPath: state + "/containers/com.example.other", withIntermediateDirectories: true)
            try Data("secret".utf8).write(to: URL(fileURLWithPath: state + "/containers/com.example.other/secret"))
            _ = try await daemon.register(
                "com.example.probe",
                command: ["/usr/bin/env", "STATE=\(state)", "OUTSIDE=\(daemon.directory)", "/bin/sh", "-c", script],
                interval: .never)
            _ = try await daemon.waitForRunEnd(of: "com.example.probe") {
                _ = try await daemon.admin.send(.post, "/v1/apps/com.example.probe/fetch", as: RunRecord.self)
            }
            let probes = try String(contentsOfFile: state + "/containers/com.example.probe/probes", encoding: .utf8)
                .split(separator: "\n").map(String.init)
            #expect(
                probes == [
                    "system ok", "own-write ok", "tmp-write ok", "database refused", "other-app refused",
                    "state-list refused", "token refused",
                    "write-outside refused",
                ], "\(probes)")
            #expect(!FileManager.default.fileExists(atPath: daemon.directory + "/planted"))
            let status = try await daemon.admin.send(.get, "/v1/status", as: DaemonStatus.self)
            #expect(status.appConfinement?.hasPrefix("landlock") == true)
        }
    }

    /// The helper runs before every launch: plain C, linked statically, so starting it loads no
    /// Swift runtime (10 MB of shared library that SwiftPM links into every executable; 1 ms a
    /// launch against 3 ms when it did).
    @Test func theLaunchHelperLoadsNoSharedLibraries() async throws {
        #if os(Linux)
            let helper = try #require(Confinement.helperPath(), "bgd-confine is built beside the tests")
            let linked = try await Command.run("/usr/bin/env", ["ldd", helper])
            #expect(linked.standardOutput.contains("not a dynamic executable") || linked.standardError.contains("not a dynamic executable"), "\(linked.standardOutput)")
            #expect(!linked.standardOutput.contains("libswiftCore"))
        #endif
    }
}
