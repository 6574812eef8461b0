import BackgroundModel
import BackgroundStore
import BackgroundTransfers
import Foundation
import Logging

extension Daemon {
    /// How launched apps are confined, said once (here and in `bgctl status`), and the helper
    /// that confines them when it can.
    static func confinement(_ configuration: Configuration, logger: Logger) -> (Confinement.Mode, helper: String?) {
        var helper: String?
        let mode: Confinement.Mode
        if configuration.confineApps {
            let found = Confinement.helperPath()
            mode = Confinement.probe(helper: found)
            if case .landlock = mode { helper = found }
        } else {
            mode = .unconfined("turned off (--confine-apps off)")
        }
        if case .unconfined = mode {
            logger.notice("Launched apps are not confined", metadata: ["why": "\(mode)"])
        } else {
            logger.info("Launched apps are confined", metadata: ["mode": "\(mode)"])
        }
        return (mode, helper)
    }

    /// App processes: in cgroups of their own where bgd may make them (what a previous bgd left
    /// there reclaimed), else held by signals. Said once, here and in `bgctl status`.
    static func processMode(
        _ configuration: Configuration, stateDirectory: StateDirectory, logger: Logger
    ) -> ProcessSupervisor.Mode {
        let mode: ProcessSupervisor.Mode
        if configuration.appCgroups {
            switch AppCgroups.discover(
                instance: AppCgroups.instance(of: stateDirectory.path), origins: stateDirectory.cgroupOriginsPath)
            {
            case .available(let cgroups): mode = .cgroups(cgroups)
            case .unavailable(let why): mode = .signals(why)
            }
        } else {
            mode = .signals("turned off (--app-cgroups off)")
        }
        if case .cgroups(let cgroups) = mode {
            logger.info("Apps run in cgroups of their own", metadata: ["root": "\(cgroups.root)"])
            let reclaimed = ProcessSupervisor.reclaimLeftovers(of: cgroups, logger: logger)
            if reclaimed.ended + reclaimed.thawed > 0 {
                logger.notice(
                    "Reclaimed what a previous bgd left",
                    metadata: ["ended": "\(reclaimed.ended)", "thawed": "\(reclaimed.thawed)"])
            }
        } else {
            logger.notice("Apps are held by signals, not cgroups", metadata: ["why": "\(mode)"])
        }
        return mode
    }

    /// Runs a previous bgd left in flight are closed as interrupted (their processes ended, if
    /// still the same processes, and any process bgd started for them found by its environment);
    /// apps it left stopped are continued — nobody else would.
    static func settleWhatAPreviousBgdLeft(
        store: BackgroundStore, socketPath: String, clock: any WallClock, logger: Logger
    ) async throws {
        let interruptedRuns = try await store.closeInterruptedRuns(now: clock.now)
        for interrupted in interruptedRuns {
            logger.notice(
                "Run was in flight when bgd stopped; recorded as interrupted",
                metadata: ["app.id": "\(interrupted.run.app)", "run.id": "\(interrupted.run.id)"])
            if let pid = interrupted.processID,
                ProcessSupervisor.endOrphan(processID: pid, startTicks: interrupted.startTicks)
            {
                logger.notice("Ended an app process left over from before", metadata: ["pid": "\(pid)"])
            }
        }
        // A bgd killed between starting a run's process and recording its pid left one nobody
        // knows the pid of (in cgroup mode its cgroup went already), and whatever a recorded one
        // started in a session of its own: each carries its run in its environment.
        let runs = Set(interruptedRuns.map { $0.run.id.description })
        for pid in ProcessSupervisor.endOrphans(ofRuns: runs, socketPath: socketPath) {
            logger.notice("Ended an app process a previous bgd had started for a run", metadata: ["pid": "\(pid)"])
        }
        for leftover in try await store.takeSuspensions() where ProcessSupervisor.continueLeftover(leftover) {
            logger.notice(
                "Continued an app a previous bgd had suspended",
                metadata: ["app.id": "\(leftover.app)", "pid": "\(leftover.processID)"])
        }
    }

    /// Upload copies and partial downloads of transfers that have ended (a crash between an
    /// ending and its file's removal leaves one; a bgd before session 30 kept a failed
    /// transfer's) are removed from the state's and every container's transfer directory. Not
    /// the operator's partials beside their destinations: bgd does not list the operator's
    /// directories.
    static func removeFilesOfEndedTransfers(
        store: BackgroundStore, stateDirectory: StateDirectory, logger: Logger
    )
        async throws
    {
        let known = try await store.outstandingTransferIDs()
        var removed = TransferFiles.removeLeftovers(
            in: stateDirectory.allTransfersPaths(), outstanding: known.outstanding, highest: known.highest)
        // The operator's partial files sit beside their destinations, in directories bgd does
        // not list: the store says where each was.
        for path in try await store.endedOperatorPartialPaths() where SafeFiles.remove(path) { removed += 1 }
        if removed > 0 {
            logger.notice("Removed the files of transfers that had ended", metadata: ["files": "\(removed)"])
        }
    }
}
