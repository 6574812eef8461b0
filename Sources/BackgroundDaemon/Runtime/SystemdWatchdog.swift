import BackgroundModel
import BackgroundStore
import Foundation
import Logging
import QuietThreads
import ServiceLifecycle

#if canImport(Glibc)
    import Glibc
#endif

/// systemd's watchdog (`WatchdogSec=` in the unit): bgd says `WATCHDOG=1` every half of the
/// interval systemd gives it (`WATCHDOG_USEC`), after asking its store for something — so a bgd
/// whose event loops or store threads are stuck stops saying it, and systemd restarts it. Its
/// timer is the watchdog's own and the only one it adds; without `WATCHDOG_USEC` it is not started.
struct SystemdWatchdog: Service {
    let interval: Duration
    let store: BackgroundStore
    let logger: Logger

    /// Half of `WATCHDOG_USEC` when systemd asks this process for pings (`WATCHDOG_PID` absent or ours).
    static func interval(environment: [String: String] = ProcessInfo.processInfo.environment) -> Duration? {
        guard let text = environment["WATCHDOG_USEC"], let microseconds = Int64(text), microseconds > 0 else {
            return nil
        }
        if let pid = environment["WATCHDOG_PID"], Int32(pid) != getpid() { return nil }
        return .microseconds(microseconds / 2)
    }

    func run() async throws {
        do {
            try await cancelWhenGracefulShutdown {
                while !Task.isCancelled {
                    do {
                        _ = try await store.pageCounts()
                        SystemdNotify.send("WATCHDOG=1")
                    } catch where Task.isCancelled {
                        return  // bgd is stopping: not a store that does not answer
                    } catch {
                        logger.error("The store does not answer: no watchdog ping", metadata: ["error": "\(error)"])
                    }
                    // Monotonic, as systemd's watchdog is: a wall clock set back must not starve it.
                    try await SystemClock.napOnEventLoop(interval)
                }
            }
        } catch is CancellationError {
            return
        }
    }
}
