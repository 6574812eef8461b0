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
                try via-link cat "$OUTSIDE/alias/state/bgd.sqlite"
                try other-app cat "$STATE/containers/com.example.other/secret"
                try state-list ls "$STATE"
                try token cat "$BGD_SOCKET.operator-token"
                try write-outside sh -c "echo x > '$OUTSIDE/planted'"
                } > "$c/probes"
                """#
            // A link beside the state directory to its parent: granted as what it leads to, it
            // opened the state to read (Silverblue's /home is such a link to var/home).
            #expect(symlink(daemon.directory, daemon.directory + "/alias") == 0)
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
                    "system ok", "own-write ok", "tmp-write ok", "database refused", "via-link refused",
                    "other-app refused",
                    "state-list refused", "token refused",
                    "write-outside refused",
                ], "\(probes)")
            #expect(!FileManager.default.fileExists(atPath: daemon.directory + "/planted"))
            let status = try await daemon.admin.send(.get, "/v1/status", as: DaemonStatus.self)
            #expect(status.appConfinement?.hasPrefix("landlock") == true)
        }
    }

    /// bgd opens the app's launch log before the app is confined, so the log must not lead out of
    /// its container: an app that made it a link to a file outside would have its output appended
    /// there at its next launch (a shell's startup file, bgd's database) — and one that made it a
    /// FIFO would block bgd's launch. Both launches go, the output stays in the container.
    @Test func aLaunchLogTheAppReplacedLeadsNowhere() async throws {
        try await TestDaemon.with { daemon in
            guard case .landlock = daemon.daemon.confinement else { return }
            let outside = daemon.directory + "/outside.txt"
            try Data("mine\n".utf8).write(to: URL(fileURLWithPath: outside))
            let script = #"""
                c="$BGD_CONTAINER"
                echo "escaped"
                if [ ! -e "$c/planted" ]; then
                  touch "$c/planted"
                  rm -f "$c/launch.log"
                  if [ "$KIND" = link ]; then ln -s "$OUTSIDE" "$c/launch.log"; else mkfifo "$c/launch.log"; fi
                fi
                """#
            for kind in ["link", "fifo"] {
                let app = "com.example.\(kind)"
                _ = try await daemon.register(
                    app, command: ["/usr/bin/env", "KIND=\(kind)", "OUTSIDE=\(outside)", "/bin/sh", "-c", script],
                    interval: .never)
                for _ in 0..<2 {
                    let run = try await daemon.waitForRunEnd(of: app) {
                        _ = try await daemon.admin.send(.post, "/v1/apps/\(app)/fetch", as: RunRecord.self)
                    }
                    #expect(run.launched, "\(kind): \(run)")
                }
                let log = daemon.directory + "/state/containers/\(app)/launch.log"
                var status = stat()
                #expect(
                    lstat(log, &status) == 0 && (status.st_mode & S_IFMT) == S_IFREG, "\(kind): a file of its own again"
                )
                #expect(try String(contentsOfFile: log, encoding: .utf8).contains("escaped"), "\(kind)")
            }
            #expect(try String(contentsOfFile: outside, encoding: .utf8) == "mine\n", "nothing appended outside")
        }
    }

    /// The helper runs before every launch: plain C, linked statically, so starting it loads no
    /// Swift runtime (10 MB of shared library that SwiftPM links into every executable; 1 ms a
    /// launch against 3 ms when it did).
    @Test func theLaunchHelperLoadsNoSharedLibraries() async throws {
        #if os(Linux)
            let helper = try #require(Confinement.helperPath(), "bgd-confine is built beside the tests")
            let linked = try await Command.run("/usr/bin/env", ["ldd", helper])
            #expect(
                linked.standardOutput.contains("not a dynamic executable")
                    || linked.standardError.contains("not a dynamic executable"), "\(linked.standardOutput)")
            #expect(!linked.standardOutput.contains("libswiftCore"))
        #endif
    }
}
