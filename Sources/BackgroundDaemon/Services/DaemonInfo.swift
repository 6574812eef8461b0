import BackgroundGateway
import BackgroundModel
import BackgroundStore
import Foundation

/// What `bgctl status` shows: what this bgd is, where it lives and how it holds its apps.
struct DaemonInfo: Sendable {
    let store: BackgroundStore
    let runs: Runs
    let clock: any WallClock
    let stateDirectory: String
    let socketPath: String
    let startedAt: Date
    /// How launched apps are confined.
    let appConfinement: String
    /// How app processes are held (cgroups or signals, and why).
    let appProcesses: String
    /// The push gateway's URL without its port, and the port once bound; nil when it is off.
    var pushGateway: (base: String, port: BoundPort)?

    func status() async throws -> DaemonStatus {
        DaemonStatus(
            version: Daemon.version, processID: ProcessInfo.processInfo.processIdentifier,
            stateDirectory: stateDirectory, socketPath: socketPath, startedAt: startedAt, now: clock.now,
            appCount: try await store.apps().count, runningRuns: try await store.runsInFlight().count,
            nextEvaluation: try await runs.nextEvaluation(), appConfinement: appConfinement,
            appProcesses: appProcesses,
            pushGateway: pushGateway.flatMap { gateway in gateway.port.port.map { "\(gateway.base):\($0)" } })
    }
}
