import Foundation
import QuietThreads

// Idle is free (issue 17): `QuietProcess` runs bgd's tasks on NIO's event loops and takes its
// signals on a thread of their own, so no libdispatch timer wakes it every second.
// `BGD_DISPATCH=1` keeps Swift's default executor (libdispatch), to compare or to rule the
// executor out when something looks wrong.
let quietExecutor = ProcessInfo.processInfo.environment["BGD_DISPATCH"] != "1"
QuietProcess.run(quietly: quietExecutor, signalThread: "bgd-signals") { await BGD.main() }
