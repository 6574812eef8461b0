import Foundation
import QuietThreads

// An idle relay sleeps, as bgd does: `QuietProcess` runs its tasks on NIO's event loops and takes
// its signals on a thread of their own, and its SQLite store runs on threads of its own
// (`QuietDatabase`), so no libdispatch timer wakes it every second. `BGRELAY_DISPATCH=1` keeps
// Swift's default executor (libdispatch), to compare.
let quietExecutor = ProcessInfo.processInfo.environment["BGRELAY_DISPATCH"] != "1"
QuietProcess.run(quietly: quietExecutor, signalThread: "bgrelay-signals") { await BGRelay.main() }
